"""How cost grows with the queue: throughput with 1,000, 100,000 and 1,000,000 already queued.

For each backlog size, a fresh store gets a tenant ``backlog`` holding that many queued, due
notifications, bulk-inserted with one plain ``INSERT ... SELECT`` into the store's own table
after ``migrate`` (then, on Postgres, ``ANALYZE``, as autovacuum would; SQLite never analyses
by itself, so its largest size runs once more after ``ANALYZE``, as ``sqlite_analyzed``).
The tenant starts disabled, so the engine leaves its rows alone. Then, with concurrency and
batch 32 and a 0 ms provider:

- ``other_key``: 5,000 notifications of another tenant, ``bench``, are enqueued and drained
  (the clock runs from ``start()`` to the 5,000th written delivery);
- ``same_key``: a new engine enables ``backlog`` and drains 5,000 of its own rows (all of
  them when there are fewer): a tenant working through a deep queue. Stopped after
  ``--max-drain-s`` if slower; the rate is then what it delivered in that time.

Beside the drains, the statements the engine repeats, timed alone through the store (median of
a few calls): ``claim`` of 32 rows of the deep key (then released), ``due_pairs`` (the
dispatcher's refresh, over enabled tenants; ``due_keys_deep`` with the deep tenant enabled
too) and ``depth`` (per-tenant counts: every telemetry
snapshot, so every console tick, runs it). The 1,000,000 case runs on Postgres only (its bulk
insert alone takes most of a minute on a 2-core machine); SQLite stops at 100,000 unless
``--sqlite-sizes`` says otherwise. Usage::

    .venv/bin/python bench/scale_queue.py [--pg-sizes 1000,100000,1000000]
        [--sqlite-sizes 1000,100000] [--batch-count 5000] [--out FILE]
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from _common import (
    asyncpg_dsn,
    emit,
    fill,
    fresh_pg,
    new_engine,
    open_store,
    parser,
    pg_reachable,
    pg_version,
    wait_delivered,
)

from engine import Engine, SecretBox, Store

COLUMNS = (
    "tenant_id, provider_id, recipient, payload, idempotency_key, priority, state, attempt,"
    " failures, max_attempts, available_at, enqueued_at"
)
PG_BULK = (
    f"INSERT INTO notifications ({COLUMNS}) SELECT $1, $2, $3, '{{}}', "
    "'b' || lpad(g::text, 9, '0'), 0, 'queued', 0, 0, 5, $4, $4 FROM generate_series(1, $5) g"
)
SQLITE_BULK = (
    "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
    f"INSERT INTO notifications ({COLUMNS}) SELECT ?, ?, ?, '{{}}', "
    "'b' || printf('%09d', x), 0, 'queued', 0, 0, 5, ?, ? FROM g"
)


async def bulk_insert(
    url: str, tenant_id: int, provider_id: int, token: str, size: int, *, analyze_sqlite: bool
) -> float:
    """Insert ``size`` due rows for ``tenant_id``, then ``ANALYZE`` (always on Postgres, where
    autovacuum would; on SQLite, which never analyses by itself, only when asked); returns
    the seconds it took."""
    now = time.time() - 60
    t0 = time.perf_counter()
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")

        def insert() -> None:
            con = sqlite3.connect(path, isolation_level=None)
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute(SQLITE_BULK, (size, tenant_id, provider_id, token, now, now))
                con.execute("COMMIT")
                if analyze_sqlite:
                    con.execute("ANALYZE")
            finally:
                con.close()

        await asyncio.to_thread(insert)
    else:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await conn.execute(PG_BULK, tenant_id, provider_id, token, now, size)
            await conn.execute("ANALYZE notifications")
        finally:
            await conn.close()
    return time.perf_counter() - t0


async def median_ms(call: Callable[[], Awaitable[object]], times: int) -> float:
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(samples), 2)


async def statement_costs(engine: Engine, backlog_id: int, provider_id: int) -> dict[str, float]:
    queue = engine.store.queue
    enabled = [t.id for t in engine.directory.tenants.values() if t.enabled]
    claims = []
    for _ in range(5):
        t0 = time.perf_counter()
        leased = await queue.claim(
            backlog_id, provider_id, 32, owner="bench-probe", lease_s=30, now=time.time()
        )
        claims.append((time.perf_counter() - t0) * 1000)
        await queue.release("bench-probe", leased)  # untimed: back in the queue as it was
    return {
        "claim_32_ms": round(statistics.median(claims), 2),
        # The dispatcher asks for enabled tenants only: cheap while the deep one is disabled,
        # and the second figure once it is enabled (the same_key drain).
        "due_keys_ms": await median_ms(lambda: queue.due_pairs(time.time(), enabled), 5),
        "due_keys_deep_ms": await median_ms(
            lambda: queue.due_pairs(time.time(), [*enabled, backlog_id]), 5
        ),
        "depth_ms": await median_ms(engine.store.notifications.depth, 3),
    }


async def drain(engine: Engine, count: int, max_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    await engine.start()
    done = await wait_delivered(engine, count, timeout_s=max_s)
    elapsed = time.perf_counter() - t0
    delivered = engine.telemetry.totals().delivered
    await engine.stop()
    return {
        "delivered": delivered,
        "finished": done,
        "seconds": round(elapsed, 2),
        "per_s": round(delivered / elapsed, 1),
    }


async def one_size(
    url: str, store: Store, box: SecretBox, size: int, args: Any, *, analyze_sqlite: bool = False
) -> dict[str, Any]:
    async with new_engine(store) as setup:
        await setup.provider_add("noop", "simulated", options={"latency_ms": "0"})
        backlog = await setup.tenant_add("backlog", enabled=False)
        await setup.tenant_add("bench")
        provider_id = setup.directory.provider_id("noop") or 0
    token = box.encrypt("u@example.com")
    insert_s = await bulk_insert(
        url, backlog.id, provider_id, token, size, analyze_sqlite=analyze_sqlite
    )
    result: dict[str, Any] = {"backlog": size, "bulk_insert_s": round(insert_s, 1)}
    async with new_engine(store) as engine:
        result["statements"] = await statement_costs(engine, backlog.id, provider_id)
        await fill(engine, "bench", args.batch_count)
        result["other_key"] = await drain(engine, args.batch_count, args.max_drain_s)
    async with new_engine(store) as engine:
        await engine.tenant_update("backlog", enabled=True)
        count = min(size, args.batch_count)
        result["same_key"] = await drain(engine, count, args.max_drain_s)
    return result


@asynccontextmanager
async def sqlite_url(tag: str) -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / f'{tag}.db'}"


async def run_store(
    sizes: list[int], make: Callable[[str], Any], args: Any, *, analyze_sqlite: bool = False
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        async with make(f"scale{size}") as url, open_store(url) as (store, box):
            rows.append(await one_size(url, store, box, size, args, analyze_sqlite=analyze_sqlite))
    return rows


def sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--pg-sizes", default="1000,100000,1000000")
    p.add_argument("--sqlite-sizes", default="1000,100000")
    p.add_argument("--batch-count", type=int, default=5000, help="notifications drained")
    p.add_argument("--max-drain-s", type=float, default=20.0)
    args = p.parse_args()
    report: dict[str, Any] = {
        "bench": "scale_queue",
        "batch_count": args.batch_count,
        "concurrency": 32,
        "batch": 32,
    }
    if args.sqlite_sizes:
        report["sqlite"] = await run_store(sizes(args.sqlite_sizes), sqlite_url, args)
        # Once more with the planner's statistics, as `ANALYZE` or `PRAGMA optimize` leave them.
        largest = [max(sizes(args.sqlite_sizes))]
        report["sqlite_analyzed"] = await run_store(largest, sqlite_url, args, analyze_sqlite=True)
    if args.pg_sizes and await pg_reachable():
        report["postgres_version"] = await pg_version()
        report["postgres"] = await run_store(
            sizes(args.pg_sizes), lambda tag: fresh_pg(tag, durable=False), args
        )
        report["postgres_note"] = "synchronous_commit off on the bench database"
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
