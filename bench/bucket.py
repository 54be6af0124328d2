"""Cost of ``TokenBucket.try_take`` in ns/op beside a ceiling: the same arithmetic inline.

Both run in the same process with the same call shape (time advancing 1 us per call, a rate
high enough that every take succeeds), so the difference is the class's overhead: method
calls, argument checks and attribute access. Prints JSON.

    .venv/bin/python bench/bucket.py [--number N] [--repeat R]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import timeit
from collections.abc import Callable

from engine.limits.bucket import TokenBucket


def make_ceiling(rate_per_s: float, burst: float, now: float) -> Callable[[float, float], bool]:
    """A bare function over closed-over floats: the least work a bucket take can do."""
    tokens, stamp = burst, now

    def take(now: float, n: float) -> bool:
        nonlocal tokens, stamp
        elapsed = now - stamp
        if elapsed > 0:
            tokens = min(burst, tokens + elapsed * rate_per_s)
            stamp = now
        if tokens < n:
            return False
        tokens -= n
        return True

    return take


def measure(take: Callable[[float, float], bool], number: int, repeat: int) -> dict[str, float]:
    times = itertools.count(0.0, 1e-6)
    runs = timeit.repeat(
        "take(next(times), 1.0)",
        globals={"take": take, "times": times},
        number=number,
        repeat=repeat,
    )
    per_op = [run / number * 1e9 for run in runs]
    return {"best_ns": round(min(per_op), 1), "median_ns": round(statistics.median(per_op), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=1_000_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rate_per_s, burst = 1e7, 1e7  # every take succeeds: the common, cheapest path
    bucket = TokenBucket(rate_per_s, burst, now=0.0)
    subject = measure(bucket.try_take, args.number, args.repeat)
    ceiling = measure(make_ceiling(rate_per_s, burst, 0.0), args.number, args.repeat)
    report = {
        "bench": "TokenBucket.try_take",
        "python": platform.python_version(),
        "number": args.number,
        "repeat": args.repeat,
        "subject": subject,
        "ceiling_inline": ceiling,
        "ratio_best": round(subject["best_ns"] / ceiling["best_ns"], 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
