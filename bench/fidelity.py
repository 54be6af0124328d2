"""Rate fidelity: deliveries against the ideal ``min(backlog, burst + rate * t)`` and the envelope.

For each rate (1, 10, 100, 1,000 and 5,000 per second by default) and each limiter (in process,
``LocalLimiter``; over Redis, ``RedisLimiter``), a fresh SQLite store gets one tenant with that
limit (burst = a tenth of a second's worth, at least 1) and a backlog larger than the run can
deliver, all queued before the engine starts. The engine then runs for ``--seconds`` with the
simulated provider at 0 ms, and the delivery log's timestamps are read back.

Reported per run: ``achieved / ideal`` at the end of the run; the most deliveries in any window
of W seconds (sliding: one window starts at every delivery, closed at both ends) against the
envelope ``burst + rate * W + 1`` (docs/architecture.md), and against the bound docs/deployment.md
states for what a provider sees, ``burst + rate * (W + 0.02) + 1`` (a send goes out at most
``token_lag_s`` after its token, plus the moment to the provider's clock); and a short
timeline for the plot.
Usage::

    .venv/bin/python bench/fidelity.py [--rates 1,10,100,1000,5000] [--seconds 4]
        [--concurrency 128] [--batch 128] [--skip-redis] [--out FILE]
"""

from __future__ import annotations

import asyncio
import bisect
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import REDIS, emit, fill, open_engine, parser

from engine import Limit, LocalLimiter, SystemClock, worst_window
from engine.limits.redis_limiter import RedisLimiter

WINDOWS_S = (0.1, 0.5, 1.0, 2.0)
STATED_LAG_S = 0.02  # docs/deployment.md: "within a stated lag of 20 ms"
TIMELINE_POINTS = 40


def burst_for(rate_per_s: float) -> float:
    return max(1.0, rate_per_s / 10)


def analyse(
    ts: list[float], rate: float, burst: float, backlog: int, run_s: float
) -> dict[str, Any]:
    """``ts``: delivery times in seconds from the engine's start, sorted."""
    in_run = ts[: bisect.bisect_right(ts, run_s)]
    ideal = min(backlog, burst + rate * run_s)
    windows = {}
    for w in WINDOWS_S:
        worst = worst_window(in_run, w, rate, burst)
        lagged = worst_window(in_run, w, rate, burst, lag_s=STATED_LAG_S)
        windows[str(w)] = {
            "max": int(worst.count),
            "envelope": round(worst.allowed, 1),
            "ok": worst.holds,
            "within_stated_lag": lagged.holds,
        }
    step = run_s / TIMELINE_POINTS
    timeline = [
        (
            round(i * step, 3),
            bisect.bisect_right(in_run, i * step),
            round(min(backlog, burst + rate * i * step), 1),
        )
        for i in range(TIMELINE_POINTS + 1)
    ]
    half = in_run[bisect.bisect_left(in_run, run_s / 2) :]
    return {
        "delivered": len(in_run),
        # The rate held once the burst is spent: deliveries in the second half of the run.
        "second_half_rate_over_rate": round(len(half) / (run_s / 2) / rate, 3),
        "ideal": round(ideal, 1),
        "achieved_over_ideal": round(len(in_run) / ideal, 3),
        "first_delivery_s": round(in_run[0], 4) if in_run else None,
        "windows": windows,
        "all_within_envelope": all(w["ok"] for w in windows.values()),
        "all_within_stated_lag": all(w["within_stated_lag"] for w in windows.values()),
        "timeline": timeline,
    }


def delivery_times(path: Path, t0: float) -> list[float]:
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT ts FROM delivery_log WHERE outcome = 'delivered' ORDER BY ts")
        return [ts - t0 for (ts,) in rows]
    finally:
        con.close()


async def one_run(
    backend: str, rate: float, run_s: float, concurrency: int, batch: int
) -> dict[str, Any]:
    burst = burst_for(rate)
    backlog = int(burst + rate * run_s * 1.25) + 10
    prefix = f"omnipost-fidelity-{uuid.uuid4().hex[:8]}"
    limiter = (
        RedisLimiter(REDIS, clock=SystemClock(), prefix=prefix)
        if backend == "redis"
        else LocalLimiter(SystemClock())
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fidelity.db"
        async with open_engine(
            f"sqlite:///{path}",
            concurrency=concurrency,
            batch=batch,
            limiter=limiter,
            limiter_backend=backend,
        ) as b:
            await fill(b.engine, "t", backlog, limit=Limit(rate, burst))
            t0 = time.time()
            await b.engine.start()
            await asyncio.sleep(run_s)
            await b.engine.stop()
        ts = delivery_times(path, t0)
    if backend == "redis":
        await _drop_keys(prefix)
    return {
        "backend": backend,
        "rate_per_s": rate,
        "burst": burst,
        "backlog": backlog,
        "seconds": run_s,
        **analyse(ts, rate, burst, backlog, run_s),
    }


async def _drop_keys(prefix: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def redis_up() -> bool:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(REDIS, socket_connect_timeout=1)
    try:
        return bool(await client.ping())
    except (RedisError, OSError):
        return False
    finally:
        await client.aclose()


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rates", default="1,10,100,1000,5000")
    p.add_argument("--seconds", type=float, default=4.0, help="length of each run")
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--skip-redis", action="store_true")
    args = p.parse_args()
    backends = ["local"]
    if not args.skip_redis and await redis_up():
        backends.append("redis")
    runs = []
    for rate in (float(r) for r in args.rates.split(",")):
        for backend in backends:
            runs.append(await one_run(backend, rate, args.seconds, args.concurrency, args.batch))
    report = {
        "bench": "fidelity",
        "store": "sqlite",
        "provider": "simulated, latency_ms=0",
        "concurrency": args.concurrency,
        "batch": args.batch,
        "windows_s": list(WINDOWS_S),
        "runs": runs,
    }
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
