"""Run one test module (or node) many times over and say how many runs passed.

A test that passes most of the time is a suite that cannot be trusted: this is how a flaky
one is shown fixed (issue 46: ``tests/engine/planning/test_plan_accuracy.py`` 30 of 30 on a
quiet machine).

    python scripts/repeat_test.py tests/engine/planning/test_plan_accuracy.py --runs 30

Each run is a fresh ``pytest`` process; a failing run's assertion lines are printed. The
last line is JSON (``runs``, ``passed``, ``seconds``, ``load_before``); the exit status is 0
only when every run passed. Check ``uptime`` first: a busy machine is not a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a test module or node id, as pytest takes it")
    parser.add_argument("--runs", type=int, default=30, help="how many runs (default 30)")
    parser.add_argument("-k", dest="keyword", help="pytest's -k expression")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", args.target]
    if args.keyword:
        command += ["-k", args.keyword]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    passed = 0
    for run in range(1, args.runs + 1):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        ok = done.returncode == 0
        passed += ok
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"
        print(f"run {run}/{args.runs}: {'passed' if ok else 'FAILED'} ({summary})", flush=True)
        if not ok:
            for line in done.stdout.splitlines():
                if line.startswith("E ") and "Error" in line:
                    print(f"    {line[1:].strip()}")
    seconds = round(time.monotonic() - started, 1)
    print(f"{passed} of {args.runs} runs passed")
    figures = {"runs": args.runs, "passed": passed, "seconds": seconds, "load_before": load_before}
    print(json.dumps(figures))
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
