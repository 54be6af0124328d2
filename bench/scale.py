"""Scale-out throughput: 1, 2 and 4 ``omnipost worker`` processes on one Postgres and one Redis.

Each run gets a fresh Postgres database and a private ``redis-server`` emptied for it, with
COUNT notifications of one unlimited tenant enqueued first (not timed) through a ``simulated``
provider with no latency and a high limit (1,000,000/s, burst 10,000) configured, so every
send still takes its tokens from Redis. The workers run ``--until-empty --redis URL``; the
figures are ``drain_per_s`` (deliveries over the span of their ``delivery_log`` timestamps)
and ``wall_per_s`` (over the time from spawning the processes until the last exits, start-up
included), each the median of ``--repeat`` runs taken in alternating order. Then, on the same
Redis in the same run, ``bench/redis_limiter.py``'s comparison: ``RedisLimiter.reserve`` over
a send's 3 buckets beside ``EVALSHA`` of ``return 1``. Prints JSON.

    .venv/bin/python bench/scale.py [--count 20000] [--workers 1,2,4] [--repeat 2]
        [--concurrency 32] [--seconds 1.0] [--out FILE]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from _common import (
    asyncpg_dsn,
    emit,
    fill,
    fresh_pg,
    log_level_warning,
    median,
    parser,
    pg_reachable,
    pg_version,
    spread,
)
from redis.asyncio import Redis
from redis_limiter import run as reservations

from engine import (
    BUILTIN_KINDS,
    Engine,
    Limit,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)
from testkit.cli import REPO, clean_env
from testkit.redis_server import RedisServer

PROVIDER_LIMIT = Limit(1_000_000.0, 10_000.0)


async def prepare(url: str, key: str, count: int) -> float:
    """Migrate, add the provider and the tenant, enqueue ``count``; returns the enqueue rate."""
    async with Store(url, SecretBox([key])) as store:
        await store.migrate()
        async with Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
            await engine.provider_add("noop", "simulated", PROVIDER_LIMIT, {"latency_ms": "0"})
            return await fill(engine, "bench", count)


def drain(url: str, redis_url: str, key: str, n: int, concurrency: int) -> float:
    """Run ``n`` workers until the queue is empty; returns the wall seconds they took."""
    env = clean_env(Path(tempfile.mkdtemp(prefix="omnipost-scale-")), OMNIPOST_KEYS=key)
    args = ["--db", url, "--redis", redis_url, "--concurrency", str(concurrency)]
    command = [sys.executable, "-m", "app", "worker", "--quiet", "--until-empty", *args]
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(n)
    ]
    outputs = [proc.communicate(timeout=600)[0].decode(errors="replace") for proc in procs]
    wall_s = time.perf_counter() - t0
    failed = [out for proc, out in zip(procs, outputs, strict=True) if proc.returncode != 0]
    if failed:
        raise RuntimeError(f"a worker failed:\n{failed[0]}")
    return wall_s


async def deliveries(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=5)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, min(ts) AS first, max(ts) AS last,"
            " count(DISTINCT worker) AS workers FROM delivery_log WHERE outcome = 'delivered'"
        )
        per_worker = await conn.fetch(
            "SELECT count(*) AS n FROM delivery_log WHERE outcome = 'delivered'"
            " GROUP BY worker ORDER BY n DESC"
        )
    finally:
        await conn.close()
    return {**dict(row), "per_worker": [r["n"] for r in per_worker]}


async def one_run(redis: RedisServer, n: int, count: int, concurrency: int) -> dict[str, Any]:
    key = SecretBox.generate_key()
    async with fresh_pg(f"scale{n}") as url:
        client = Redis.from_url(redis.url)
        try:
            await client.flushall()  # the private server: last run's buckets go
        finally:
            await client.aclose()
        enqueue_per_s = await prepare(url, key, count)
        wall_s = drain(url, redis.url, key, n, concurrency)
        seen = await deliveries(url)
    if seen["n"] != count:
        raise RuntimeError(f"{n} workers delivered {seen['n']} of {count}")
    span_s = max(seen["last"] - seen["first"], 1e-9)
    return {
        "workers": n,
        "drain_per_s": round(count / span_s),
        "wall_per_s": round(count / wall_s),
        "wall_s": round(wall_s, 2),
        "workers_that_delivered": seen["workers"],
        "per_worker": seen["per_worker"],
        "enqueue_per_s": round(enqueue_per_s),
    }


async def main(args: Any) -> dict[str, Any]:
    if not await pg_reachable():
        raise SystemExit("bench/scale.py needs PostgreSQL (OMNIPOST_BENCH_PG)")
    counts = [int(n) for n in args.workers.split(",")]
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with RedisServer(Path(tempfile.mkdtemp(prefix="omnipost-scale-redis-"))) as redis:
        for repeat in range(args.repeat):  # the order flips each time, so drift hits all alike
            for n in counts if repeat % 2 == 0 else counts[::-1]:
                runs[n].append(await one_run(redis, n, args.count, args.concurrency))
        limiter = await reservations(redis.url, args.seconds, 3)
    drains = {n: median([r["drain_per_s"] for r in rs], 0) for n, rs in runs.items()}
    return {
        "benchmark": "scale",
        "count": args.count,
        "repeat": args.repeat,
        "concurrency_per_worker": args.concurrency,
        "provider_limit": {"rate_per_s": PROVIDER_LIMIT.rate_per_s, "burst": PROVIDER_LIMIT.burst},
        "postgres": await pg_version(),
        "drain": [
            {
                "workers": n,
                "drain_per_s": spread([r["drain_per_s"] for r in rs], 0),
                "wall_per_s": spread([r["wall_per_s"] for r in rs], 0),
                "speedup": round(drains[n] / drains[counts[0]], 2),
                "runs": rs,
            }
            for n, rs in runs.items()
        ],
        "redis_reservations": limiter,
    }


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--workers", default="1,2,4", help="worker processes per run, comma separated")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2, help="runs of each worker count")
    p.add_argument("--seconds", type=float, default=1.0, help="length of one reservation run")
    cli = p.parse_args()
    log_level_warning()
    emit(asyncio.run(main(cli)), cli.out)
