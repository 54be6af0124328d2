"""Running ``omnipost`` in-process (``app.cli.main``) or as a process, for the CLI tests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from app.cli import main
from engine.store import normalize_url

__all__ = [
    "Cli",
    "Result",
    "assert_one_sentence",
    "clean_env",
    "file_run",
    "run_process",
    "sql",
    "start_worker",
    "stats_depth",
]

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


def start_worker(args: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m app worker ARGS`` in the background, its output appended to ``log``."""
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "app", "worker", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=REPO,
        )


def file_run(cli: Cli, folder: Path, keys: Sequence[str], *, rate: str, burst: str) -> Path:
    """On ``cli``'s migrated store: tenant ``acme`` at ``rate``/s with ``burst``, a ``file``
    provider ``audit``, and one notification per key (to ``uN@example.com``) enqueued from a
    batch file in ``folder``. Returns the file the provider writes."""
    out = folder / "delivered.jsonl"
    cli.ok("tenant", "add", "acme", "--rate", rate, "--burst", burst)
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={out}")
    batch = folder / "batch.jsonl"
    items = (
        {"tenant": "acme", "provider": "audit", "recipient": f"u{n}@example.com", "key": key}
        for n, key in enumerate(keys)
    )
    batch.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    assert cli.ok("enqueue", "--file", str(batch)) == f"queued {len(keys)}, already queued 0\n"
    return out


def stats_depth(cli: Cli) -> dict[str, int]:
    """Queued, leased, delivered and dead of the store's one tenant (``stats --json``)."""
    [tenant] = cli.json("stats")["depth"]
    return {k: tenant[k] for k in ("queued", "leased", "delivered", "dead")}


def sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the store behind the engine's back; returns its rows, if any."""

    async def run() -> list[tuple[Any, ...]]:
        engine = create_async_engine(normalize_url(url))
        try:
            async with engine.begin() as conn:
                result = await conn.execute(sa.text(statement), params)
                return [tuple(row) for row in result] if result.returns_rows else []
        finally:
            await engine.dispose()

    return asyncio.run(run())
