"""Drain throughput: N pre-enqueued notifications, no limits, a no-op provider.

Prints JSON: notifications/s for the engine on SQLite and on Postgres (when reachable).
Usage: python bench/drain.py [--count 50000] [--concurrency 64] [--pg URL] [--skip-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy.engine import make_url

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)


async def drain(url: str, count: int, concurrency: int) -> dict[str, float | int | str]:
    box = SecretBox([SecretBox.generate_key()])
    async with Store(url, box) as store:
        await store.migrate()
        settings = EngineSettings(dispatch=DispatcherSettings(concurrency=concurrency, batch=64))
        async with Engine(
            store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings
        ) as engine:
            await engine.tenant_add("bench")
            await engine.provider_add("noop", "simulated", options={"latency_ms": "0"})
            t0 = time.perf_counter()
            chunk = 1000
            for start in range(0, count, chunk):
                items = [
                    EnqueueItem("noop", f"user{i}@example.com", {"i": i}, f"k{i}", 0)
                    for i in range(start, min(count, start + chunk))
                ]
                await engine.enqueue_many("bench", items)
            enqueue_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            await engine.start()
            ok = await engine.run_until_empty(timeout_s=900, poll_s=0.05)
            drain_s = time.perf_counter() - t1
            delivered = engine.telemetry.totals().delivered
            await engine.stop()
    return {
        "store": store.dialect,
        "count": count,
        "concurrency": concurrency,
        "drained": ok,
        "delivered": delivered,
        "enqueue_per_s": round(count / enqueue_s, 1),
        "drain_s": round(drain_s, 3),
        "drain_per_s": round(delivered / drain_s, 1),
    }


async def _pg_db(admin_url: str, sql: str) -> None:
    import asyncpg

    url = make_url(admin_url)
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database, timeout=5
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip-pg", action="store_true")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(
            await drain(f"sqlite:///{Path(tmp) / 'bench.db'}", args.count, args.concurrency)
        )
    if not args.skip_pg:
        name = f"omnipost_bench_{uuid.uuid4().hex[:8]}"
        await _pg_db(args.pg, f'CREATE DATABASE "{name}"')
        try:
            url = make_url(args.pg).set(database=name).render_as_string(hide_password=False)
            results.append(await drain(url, args.count, args.concurrency))
        finally:
            await _pg_db(args.pg, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    json.dump(
        {"benchmark": "drain", "python": sys.version.split()[0], "results": results},
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
