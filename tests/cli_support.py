"""Running ``omnipost`` in-process (``app.cli.main``) or as a process, for the CLI tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.cli import main

__all__ = ["Cli", "Result", "assert_one_sentence", "clean_env", "run_process"]

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Result:
    code: int
    out: str
    err: str


def assert_one_sentence(err: str) -> None:
    """``err`` is exactly one line that reads as one sentence from omnipost, not a traceback."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.startswith("omnipost"), line
    assert line.endswith("."), f"not a sentence: {line!r}"
    assert 20 <= len(line) <= 400, line


@dataclass
class Cli:
    """``cli("tenant", "list")`` runs ``omnipost tenant list --db URL`` and captures its output.

    Every output is kept in ``transcript``, so a test can check that a secret never appeared.
    """

    capsys: pytest.CaptureFixture[str]
    db_url: str | None = None
    transcript: list[str] = field(default_factory=list)

    def __call__(self, *args: str) -> Result:
        argv = [*args, "--db", self.db_url] if self.db_url is not None else list(args)
        self.capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self.capsys.readouterr()
        self.transcript += [captured.out, captured.err]
        return Result(code, captured.out, captured.err)

    def ok(self, *args: str) -> str:
        """Run a command that must succeed; returns its standard output."""
        result = self(*args)
        assert result.code == 0, f"omnipost {' '.join(args)} -> {result.code}: {result.err}"
        assert "Traceback" not in result.err
        return result.out

    def json(self, *args: str) -> Any:
        """Run a ``--json`` command that must succeed; returns the parsed output."""
        return json.loads(self.ok(*args, "--json"))


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a child ``omnipost``: no OMNIPOST_* from outside, HOME set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIPOST_")}
    env.update(OMNIPOST_HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return env


def run_process(
    args: list[str], env: dict[str, str], *, stdin: str = "", timeout_s: float = 60.0
) -> Result:
    """Run ``python -m app ARGS`` to completion."""
    proc = subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout_s,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)
