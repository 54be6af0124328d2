"""Cost per rate-limit decision: OmniPost's limiters beside aiolimiter, limits and pyrate-limiter.

In process, each limiter is asked for one token per call, back to back, in two states:

- ``allow``: a limit so high that every call is granted (the common path);
- ``deny``: a limit already used up (1 per hour), so every call is refused.

Rows: OmniPost's ``TokenBucket.try_take`` (time from ``time.monotonic()``, as the peers read
their own clocks) and ``LocalLimiter.reserve_at`` / ``reserve`` over a send's 3 buckets (all or
nothing); aiolimiter's ``has_capacity`` (a check that takes nothing) and ``acquire`` (which
returns at once while there is room); limits' fixed window, moving window and sliding window
counter over ``MemoryStorage`` (``hit``); pyrate-limiter's ``try_acquire(blocking=False)`` on
its default in-memory bucket and on its token-bucket state bucket. ``baseline`` is an empty
call through the same harness: its cost is in every other row. Async rows run in one
coroutine (``await`` per call); their baseline is an empty coroutine.

Over Redis (same server, one ``redis.asyncio`` client library for both), reservations per
second, sequentially and from 16 tasks: ``RedisLimiter.reserve`` (one Lua call; 1 bucket and a
send's 3) against limits' async ``RedisStorage`` with the moving window and sliding window
counter strategies (``hit``, 1 key). Keys live under fresh prefixes and are deleted after.

Median of ``--repeat`` runs, sides alternating. Prints JSON::

    .venv/bin/python bench/limiter_peers.py [--number N] [--repeat R] [--seconds S] [--out FILE]
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
import timeit
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from _common import REDIS, emit, parser

from engine import BucketKey, Limit, LocalLimiter, SystemClock, TokenBucket
from engine.limits.redis_limiter import RedisLimiter

HIGH = 10**9  # per second: never reached in a run
SEND = BucketKey.for_send("bench", "noop")


@dataclass(frozen=True)
class Subject:
    call: Callable[[], Any]
    asynchronous: bool = False


def aio(call: Callable[[], Awaitable[object]]) -> Subject:
    return Subject(call, asynchronous=True)


# -- in process: the subjects ---------------------------------------------------------------


def omnipost(allow: bool) -> dict[str, Subject]:
    mono = time.monotonic
    rate, burst = (HIGH, HIGH) if allow else (1 / 3600, 1)
    bucket = TokenBucket(rate, burst, now=mono())
    limiter = LocalLimiter(SystemClock())
    for key in SEND:
        limiter.configure_at(mono(), key, Limit(rate, burst))
    if not allow:
        bucket.try_take(mono())
        limiter.reserve_at(mono(), SEND, 1)
    return {
        "omnipost TokenBucket.try_take": Subject(lambda: bucket.try_take(mono(), 1.0)),
        "omnipost LocalLimiter.reserve_at (3 buckets)": Subject(
            lambda: limiter.reserve_at(mono(), SEND, 1)
        ),
        "omnipost LocalLimiter.reserve (3 buckets, async)": aio(lambda: limiter.reserve(SEND, 1)),
    }


async def aiolimiter_subjects(allow: bool) -> dict[str, Subject]:
    from aiolimiter import AsyncLimiter

    # A leaky bucket: max_rate per time_period. Deny: filled by one acquire, draining 1 an
    # hour; acquire would then wait, so only the check is timed.
    limiter = AsyncLimiter(HIGH, 1) if allow else AsyncLimiter(1, 3600)
    subjects = {"aiolimiter has_capacity (check only)": Subject(limiter.has_capacity)}
    if allow:
        subjects["aiolimiter acquire (async)"] = aio(limiter.acquire)
    else:
        await limiter.acquire()
    return subjects


def limits_subjects(allow: bool) -> dict[str, Subject]:
    from limits import RateLimitItemPerHour, RateLimitItemPerSecond, storage, strategies

    item = RateLimitItemPerSecond(HIGH) if allow else RateLimitItemPerHour(1)
    subjects: dict[str, Subject] = {}
    for label, kind in (
        ("fixed window", strategies.FixedWindowRateLimiter),
        ("moving window", strategies.MovingWindowRateLimiter),
        ("sliding window counter", strategies.SlidingWindowCounterRateLimiter),
    ):
        limiter = kind(storage.MemoryStorage())
        if not allow:
            limiter.hit(item, "bench")
        subjects[f"limits {label} hit"] = Subject(functools.partial(limiter.hit, item, "bench"))
    return subjects


def pyrate_subjects(allow: bool) -> dict[str, Subject]:
    from pyrate_limiter import Duration, Limiter, Rate, limiter_factory

    rate = Rate(HIGH, Duration.SECOND) if allow else Rate(1, Duration.HOUR)
    window = Limiter(rate)  # the default: an in-memory, sliding-window-log bucket
    token = limiter_factory.create_token_bucket_limiter(
        HIGH if allow else 1, Duration.SECOND if allow else Duration.HOUR
    )
    if not allow:
        window.try_acquire("bench", blocking=False)
        token.try_acquire("bench", blocking=False)
    return {
        "pyrate-limiter in-memory bucket try_acquire": Subject(
            functools.partial(window.try_acquire, "bench", blocking=False)
        ),
        "pyrate-limiter token bucket try_acquire": Subject(
            functools.partial(token.try_acquire, "bench", blocking=False)
        ),
    }


# -- in process: the harness ----------------------------------------------------------------


def ns_sync(call: Callable[[], object], number: int) -> float:
    return timeit.Timer(call).timeit(number) / number * 1e9


async def ns_async(call: Callable[[], Awaitable[object]], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        await call()
    return (time.perf_counter() - t0) / number * 1e9


async def ns_per_call(subject: Subject, number: int) -> float:
    if subject.asynchronous:
        return await ns_async(subject.call, number)
    return ns_sync(subject.call, number)


async def _noop() -> None:
    return None


async def subjects(allow: bool) -> dict[str, Subject]:
    return {
        "baseline (empty call)": Subject(lambda: None),
        "baseline (empty coroutine)": aio(_noop),
        **omnipost(allow),
        **await aiolimiter_subjects(allow),
        **limits_subjects(allow),
        **pyrate_subjects(allow),
    }


async def in_process(number: int, repeat: int) -> dict[str, Any]:
    """ns per decision, median of ``repeat`` runs, for every subject in both states."""
    result: dict[str, Any] = {}
    for state in ("allow", "deny"):
        samples: dict[str, list[float]] = {}
        for _ in range(repeat):
            # Fresh limiters each run: window limiters keep one entry per hit in the window.
            for name, subject in (await subjects(state == "allow")).items():
                samples.setdefault(name, []).append(await ns_per_call(subject, number))
        rows = {
            name: {"median_ns": round(statistics.median(v), 1), "min_ns": round(min(v), 1)}
            for name, v in samples.items()
        }
        ours = rows["omnipost TokenBucket.try_take"]["median_ns"]
        for row in rows.values():
            row["over_try_take"] = round(row["median_ns"] / ours, 2)
        result[state] = rows
    return result


# -- over Redis -----------------------------------------------------------------------------


async def per_s(call: Callable[[], Awaitable[object]], tasks: int, seconds: float) -> float:
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


async def redis_subjects(
    client: Any, ours: str, theirs: str
) -> tuple[dict[str, Callable[[], Awaitable[object]]], Callable[[], Awaitable[None]]]:
    """The Redis subjects, and a coroutine function that closes and cleans up after them."""
    from limits import RateLimitItemPerSecond
    from limits.aio import storage, strategies

    limiter = RedisLimiter(client, clock=SystemClock(), prefix=ours)
    for key in SEND:
        await limiter.configure(key, Limit(HIGH, HIGH))
    tenant = (BucketKey.for_tenant("bench"),)
    store = storage.RedisStorage(
        REDIS.replace("redis://", "async+redis://", 1), implementation="redispy", key_prefix=theirs
    )
    item = RateLimitItemPerSecond(10**7)
    moving = strategies.MovingWindowRateLimiter(store)
    sliding = strategies.SlidingWindowCounterRateLimiter(store)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "omnipost RedisLimiter.reserve (1 bucket)": lambda: limiter.reserve(tenant, 1),
        "omnipost RedisLimiter.reserve (3 buckets)": lambda: limiter.reserve(SEND, 1),
        "limits RedisStorage moving window hit": lambda: moving.hit(item, "bench"),
        "limits RedisStorage sliding window counter hit": lambda: sliding.hit(item, "bench"),
    }

    async def close() -> None:
        await limiter.aclose()
        for prefix in (ours, theirs):
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)

    return calls, close


async def over_redis(seconds: float, repeat: int) -> dict[str, Any]:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS)
    tag = uuid.uuid4().hex[:8]
    calls, close = await redis_subjects(client, f"omnipost-bench-{tag}", f"limits-bench-{tag}")
    try:
        for call in calls.values():  # warm up pools and script caches
            await per_s(call, 16, 0.2)
        result: dict[str, Any] = {"server": (await client.info("server")).get("redis_version")}
        for tasks in (1, 16):
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(repeat):
                for name, call in calls.items():
                    samples[name].append(await per_s(call, tasks, seconds))
            rows = {name: summarize_rate(v) for name, v in samples.items()}
            ours = rows["omnipost RedisLimiter.reserve (1 bucket)"]["median_per_s"]
            for row in rows.values():
                row["over_reserve_1"] = round(row["median_per_s"] / ours, 2)
            result["sequential" if tasks == 1 else f"concurrent_{tasks}"] = rows
        return result
    finally:
        await close()
        await client.aclose()


def summarize_rate(samples: list[float]) -> dict[str, float]:
    med = statistics.median(samples)
    return {
        "median_per_s": round(med),
        "median_us": round(1e6 / med, 1),
        "best_per_s": round(max(samples)),
    }


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--number", type=int, default=100_000, help="calls per in-process run")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="length of one Redis run")
    p.add_argument("--skip-redis", action="store_true")
    args = p.parse_args()
    report: dict[str, Any] = {
        "bench": "limiter_peers",
        "number": args.number,
        "repeat": args.repeat,
        "in_process": await in_process(args.number, args.repeat),
    }
    if not args.skip_redis:
        report["redis"] = await over_redis(args.seconds, max(1, args.repeat // 2))
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
