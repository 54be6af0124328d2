"""Reservations per second of ``RedisLimiter.reserve`` over a send's 3 buckets, beside a ceiling:
``EVALSHA`` of a trivial script (``return 1``) on the same server, client and run.

Both go through one ``redis.asyncio`` client, made as the limiter makes its own (socket
timeouts of its ``call_timeout_s``, 0.5 s), once with 1 task (a round trip at a time) and once
with 16 concurrent tasks. Limits are high enough that every reservation succeeds, so
the limiter takes its common path: read, refill and debit 3 buckets and write them back.
Runs alternate between the two so drift hits both alike. Keys live under a fresh prefix and
are deleted afterwards.

Then a drain with each limiter: ``--drain-count`` notifications of one tenant (a limit of
1,000,000/s, so its buckets are read and written on every claim but never hold a send back)
through the engine on a fresh SQLite store, concurrency and batch 32, a no-op provider, timed
from ``start()`` to the last delivery written; ``local`` with the ``LocalLimiter``, ``redis``
with a ``RedisLimiter`` on the same server, alternating, ``--repeat`` times each. Prints JSON.

    .venv/bin/python bench/redis_limiter.py [--redis URL] [--seconds S] [--repeat R]
        [--drain-count N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

from _common import fill, open_engine, wait_delivered
from redis.asyncio import Redis

from engine.clock import SystemClock
from engine.domain import BucketKey, Limit
from engine.redis_limiter import RedisLimiter

Call = Callable[[], Awaitable[object]]


async def rate(call: Call, tasks: int, seconds: float) -> float:
    """Calls per second completed by ``tasks`` tasks calling ``call`` back to back."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(tasks)))
    return done / (time.perf_counter() - start)


def summary(samples: list[float]) -> dict[str, float]:
    return {"best_per_s": round(max(samples)), "median_per_s": round(statistics.median(samples))}


CALL_TIMEOUT_S = 0.5  # RedisLimiter's default


def timed_client(url: str) -> Redis:
    """A client with the socket timeouts of the one ``RedisLimiter(url)`` makes."""
    return Redis.from_url(url, socket_timeout=CALL_TIMEOUT_S, socket_connect_timeout=CALL_TIMEOUT_S)


async def run(url: str, seconds: float, repeat: int) -> dict[str, object]:
    client = timed_client(url)
    prefix = f"omnipost-bench-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(client, clock=SystemClock(), prefix=prefix)
    send = BucketKey.for_send("bench", "noop")
    try:
        for key in send:
            await limiter.configure(key, Limit(1e9, 1e9))
        sha = await client.script_load("return 1")

        async def reserve() -> object:
            return await limiter.reserve(send, 1)

        async def trivial() -> object:
            return await client.evalsha(sha, 0)

        await rate(reserve, 16, 0.2)  # warm up the pool and the script cache
        await rate(trivial, 16, 0.2)
        results: dict[str, object] = {}
        for tasks in (1, 16):
            samples: dict[str, list[float]] = {"reserve": [], "evalsha_return_1": []}
            for _ in range(repeat):
                samples["reserve"].append(await rate(reserve, tasks, seconds))
                samples["evalsha_return_1"].append(await rate(trivial, tasks, seconds))
            ratio = statistics.median(samples["reserve"]) / statistics.median(
                samples["evalsha_return_1"]
            )
            results["sequential" if tasks == 1 else f"concurrent_{tasks}"] = {
                "tasks": tasks,
                **{name: summary(values) for name, values in samples.items()},
                "reserve_over_ceiling": round(ratio, 3),
            }
        info = await client.info("server")
        results["backend_after"] = limiter.backend  # "redis" unless something fell back
        results["server"] = {"redis_version": info.get("redis_version"), "url": url}
        return results
    finally:
        await limiter.aclose()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def drain_once(url: str, count: int, backend: str) -> float:
    """Notifications per second drained by a fresh engine on a fresh SQLite store."""
    client = timed_client(url) if backend == "redis" else None
    prefix = f"omnipost-bench-{uuid.uuid4().hex[:8]}"
    limiter = None
    if client is not None:
        limiter = RedisLimiter(client, clock=SystemClock(), prefix=prefix)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with open_engine(
                f"sqlite:///{tmp}/drain.db", limiter=limiter, limiter_backend=backend
            ) as b:
                await fill(b.engine, "bench", count, limit=Limit(1e6, 1e6))
                start = time.perf_counter()
                await b.engine.start()
                if not await wait_delivered(b.engine, count, timeout_s=300):
                    raise RuntimeError(f"the {backend} drain did not finish")
                return count / (time.perf_counter() - start)
    finally:
        if client is not None:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()


async def drains(url: str, count: int, repeat: int) -> dict[str, object]:
    samples: dict[str, list[float]] = {"local": [], "redis": []}
    for i in range(repeat):
        for backend in ("local", "redis") if i % 2 == 0 else ("redis", "local"):
            samples[backend].append(await drain_once(url, count, backend))
    ratio = statistics.median(samples["redis"]) / statistics.median(samples["local"])
    return {
        "count": count,
        **{name: summary(values) for name, values in samples.items()},
        "redis_over_local": round(ratio, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--redis", default=os.environ.get("OMNIPOST_REDIS", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternating")
    parser.add_argument(
        "--drain-count", type=int, default=10_000, help="notifications per drain (0: no drains)"
    )
    args = parser.parse_args()
    results = asyncio.run(run(args.redis, args.seconds, args.repeat))
    if args.drain_count > 0:
        results["drain"] = asyncio.run(drains(args.redis, args.drain_count, args.repeat))
    results["python"] = platform.python_version()
    results["keys_per_reservation"] = 3
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
