"""How fast the command line answers: process starts of ``omnipost`` beside the interpreter's own.
Prints JSON.

    .venv/bin/python bench/startup.py [--runs 10]

Each figure is the median (and range) of ``--runs`` new processes, from spawn to exit, after
one unmeasured run of each (so the page cache is warm, as the second command of a session
finds it), taking turns so that a burst of load touches every command alike:

- ``python -c pass``: the interpreter alone, the ceiling no command can beat;
- ``omnipost --version``, ``omnipost --help``;
- ``omnipost tenant list`` on a migrated SQLite store holding one tenant (it opens the store
  and reads);
- ``omnipost stats`` on the same store, for comparison (not a target).

The targets (issue 30): ``--version`` at most 0.15 s, ``--help`` 0.2 s, ``tenant list`` 0.35 s.
The load average is in the output, since the figures move with it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, parser

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"version": 0.15, "help": 0.2, "tenant_list": 0.35}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMNIPOST_", "PYTHON"))}
    env["OMNIPOST_HOME"] = str(home)
    env["OMNIPOST_DB"] = f"sqlite:///{home / 'omnipost.db'}"
    return env


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-2000:]}")
    return elapsed


def _summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(seconds), 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    omnipost = [sys.executable, "-m", "app"]
    with tempfile.TemporaryDirectory(prefix="omnipost-startup-") as folder:
        env = _env(Path(folder))
        _time([*omnipost, "migrate"], env)
        _time([*omnipost, "tenant", "add", "acme", "--rate", "10"], env)
        commands = {
            "python": [sys.executable, "-c", "pass"],
            "version": [*omnipost, "--version"],
            "help": [*omnipost, "--help"],
            "tenant_list": [*omnipost, "tenant", "list"],
            "stats": [*omnipost, "stats"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():  # warm the page cache
            _time(cmd, env)
        for _ in range(args.runs):
            for name, cmd in commands.items():
                times[name].append(_time(cmd, env))
    figures = {name: _summary(seconds) for name, seconds in times.items()}
    report = {
        "benchmark": "startup",
        "runs": args.runs,
        "commands": figures,
        "targets_s": TARGETS_S,
        "met": {name: figures[name]["median_s"] <= s for name, s in TARGETS_S.items()},
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
