"""Reservations per second of ``RedisLimiter.reserve`` over a send's 3 buckets, beside a ceiling:
``EVALSHA`` of a trivial script (``return 1``) on the same server, client and run.

Both go through one ``redis.asyncio`` client, made as the limiter makes its own (socket
timeouts of its ``call_timeout_s``, 0.5 s), once with 1 task (a round trip at a time) and once
with 16 concurrent tasks. The limiter sends its Lua calls past redis-py's general command path
(on connections of its own, packed once), so a second ceiling does the same: the trivial
``EVALSHA`` packed once and sent that way (``bare_evalsha_return_1``, ``reserve_over_bare``).
Limits are high enough that every reservation succeeds, so the limiter takes its common path:
read, refill and debit 3 buckets and write them back. Runs alternate between the three so drift
hits all alike. Keys live under a fresh prefix and
are deleted afterwards.

Then a drain with each limiter: ``--drain-count`` notifications of one tenant (a limit of
1,000,000/s, so its buckets are read and written on every claim but never hold a send back)
through the engine on a fresh SQLite store, concurrency and batch 32, a no-op provider, timed
from ``start()`` to the last delivery written; ``local`` with the ``LocalLimiter``, ``redis``
with a ``RedisLimiter`` on the same server, alternating, ``--drain-repeat`` times each (8: a
drain's rate moves by 20-30% between runs here, so fewer left the median ratio 0.87-1.08x
for the same code). Prints JSON.

Then batches (``batch``): ``--batch-tenants`` tenants' sends (1,000: each its own tenant bucket
and pair, all through one provider, limits high enough that every reservation succeeds) reserved
one token each, one ``reserve`` after another (a round trip each) and as one ``reserve_many``
(one round trip: scripts of 500 reservations, pipelined), alternating, for ``--seconds`` each,
``--repeat`` times: reservations per second, and ``many_over_one``.

    .venv/bin/python bench/redis_limiter.py [--redis URL] [--seconds S] [--repeat R]
        [--drain-count N] [--drain-repeat D] [--batch-tenants T]
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
from redis.asyncio.connection import AbstractConnection

from engine.core.clock import SystemClock
from engine.core.domain import BucketKey, Limit
from engine.limits.redis_limiter import RedisLimiter

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


class BareCalls:
    """The least work a call can do through redis-py: one command packed once, sent on
    connections of this object's own (one per call under way) under one timer, as the
    limiter sends its reservations; the second ceiling."""

    def __init__(self, client: Redis, command: bytes) -> None:
        self._pool = client.connection_pool
        self._command = command
        self._idle: list[AbstractConnection] = []
        self._made: list[AbstractConnection] = []

    async def __call__(self) -> object:
        if self._idle:
            conn = self._idle.pop()
        else:
            kwargs = {**self._pool.connection_kwargs, "socket_timeout": None}
            conn = self._pool.connection_class(**kwargs)
            self._made.append(conn)
        async with asyncio.timeout(CALL_TIMEOUT_S):
            await conn.send_packed_command(self._command, check_health=False)
            reply = await conn.read_response()
        self._idle.append(conn)
        return reply

    async def aclose(self) -> None:
        for conn in self._made:
            await conn.disconnect()


def packed(*args: str) -> bytes:
    """``args`` as one command in Redis's wire format."""
    parts = [arg.encode() for arg in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


async def run(url: str, seconds: float, repeat: int) -> dict[str, object]:
    client = timed_client(url)
    prefix = f"omnipost-bench-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(client, clock=SystemClock(), prefix=prefix)
    send = BucketKey.for_send("bench", "noop")
    try:
        for key in send:
            await limiter.configure(key, Limit(1e9, 1e9))
        sha = await client.script_load("return 1")
        bare = BareCalls(client, packed("EVALSHA", sha, "0"))

        async def reserve() -> object:
            return await limiter.reserve(send, 1)

        async def trivial() -> object:
            return await client.evalsha(sha, 0)

        calls: dict[str, Call] = {
            "reserve": reserve,
            "evalsha_return_1": trivial,
            "bare_evalsha_return_1": bare,
        }
        for call in calls.values():
            await rate(call, 16, 0.2)  # warm up the connections and the script cache
        results: dict[str, object] = {}
        for tasks in (1, 16):
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(repeat):
                for name, call in calls.items():
                    samples[name].append(await rate(call, tasks, seconds))
            medians = {name: statistics.median(values) for name, values in samples.items()}
            results["sequential" if tasks == 1 else f"concurrent_{tasks}"] = {
                "tasks": tasks,
                **{name: summary(values) for name, values in samples.items()},
                "reserve_over_ceiling": round(medians["reserve"] / medians["evalsha_return_1"], 3),
                "reserve_over_bare": round(
                    medians["reserve"] / medians["bare_evalsha_return_1"], 3
                ),
            }
        await bare.aclose()
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


async def batches(url: str, tenants: int, seconds: float, repeat: int) -> dict[str, object]:
    """Reservations per second for ``tenants`` sends, one by one and as one batch."""
    client = timed_client(url)
    prefix = f"omnipost-bench-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(client, clock=SystemClock(), prefix=prefix)
    sends = [BucketKey.for_send(f"t{i:05d}", "noop") for i in range(tenants)]
    asks = [(send, 1) for send in sends]
    try:
        await limiter.configure(sends[0][1], Limit(1e9, 1e9))
        for send in sends:
            await limiter.configure(send[0], Limit(1e9, 1e9))

        async def one_by_one() -> object:
            for send in sends:
                await limiter.reserve(send, 1)
            return None

        async def reserve_many() -> object:
            return await limiter.reserve_many(asks)

        calls: dict[str, Call] = {"one_by_one": one_by_one, "reserve_many": reserve_many}
        for call in calls.values():
            await rate(call, 1, 0.2)  # warm up
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for i in range(repeat):
            for name in calls if i % 2 == 0 else reversed(calls):
                samples[name].append(tenants * await rate(calls[name], 1, seconds))
        medians = {name: statistics.median(values) for name, values in samples.items()}
        return {
            "tenants": tenants,
            "reservations_per_call": tenants,
            **{name: summary(values) for name, values in samples.items()},
            "many_over_one": round(medians["reserve_many"] / medians["one_by_one"], 2),
            "backend_after": limiter.backend,
        }
    finally:
        await limiter.aclose()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
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
    parser.add_argument("--repeat", type=int, default=3, help="runs of each call, alternating")
    parser.add_argument("--drain-repeat", type=int, default=8, help="drains of each, alternating")
    parser.add_argument(
        "--drain-count", type=int, default=10_000, help="notifications per drain (0: no drains)"
    )
    parser.add_argument(
        "--batch-tenants", type=int, default=1_000, help="tenants per batch (0: no batches)"
    )
    args = parser.parse_args()
    results = asyncio.run(run(args.redis, args.seconds, args.repeat))
    if args.batch_tenants > 0:
        results["batch"] = asyncio.run(
            batches(args.redis, args.batch_tenants, args.seconds, args.repeat)
        )
    if args.drain_count > 0:
        results["drain"] = asyncio.run(drains(args.redis, args.drain_count, args.drain_repeat))
    results["python"] = platform.python_version()
    results["keys_per_reservation"] = 3
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
