"""A notification's useful life (issue 47): what a million scheduled notifications cost the rest,
and how late rows that fall due together leave. Side by side in one run, on each store:

- **drain**: 50,000 due notifications over 100 tenants (no limits, a provider with no latency)
  drained by one engine, on an empty store and on one that also holds 1,000,000 notifications
  scheduled for tomorrow: deliveries per second each, and the ratio (the issue asks 0.9 or more);
- **memory**: an ``omnipost worker`` process over each of those two stores for a few seconds: its
  peak resident set (``VmHWM``), and the ratio (the issue asks within 10%);
- **due together**: 100,000 notifications over 100 tenants (each at 20/s, burst 20) all
  scheduled for the same second: how late each one's send came after that second
  (``lateness``), and how much later than its tenant's bucket allowed (``excess``: lateness less
  ``(k + 1 - burst) / rate`` for the tenant's k-th send); p50 and p99 of both (the issue asks
  p99 excess under 1 s).

Prints JSON. Usage: python bench/lifetimes.py [--scheduled 1000000] [--due 50000]
    [--together 100000] [--skip-pg] [--only drain|together] [--out FILE]
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    asyncpg_dsn,
    drain_rate,
    emit,
    fresh_pg,
    log_level_warning,
    open_store,
    parser,
    pg_reachable,
    spread,
)
from _procs import peak_rss_mb

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    Limit,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)
from engine.telemetry.figures import percentile
from testkit.cli import REPO, clean_env

TENANTS = 100
CHUNK = 1000
DAY_S = 86_400.0


def _engine(store: Store, *, concurrency: int = 32) -> Engine:
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=concurrency, batch=32))
    return Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)


async def _setup(engine: Engine, limit: Limit | None = None) -> None:
    await engine.provider_add("noop", "simulated", options={"latency_ms": "0"})
    for t in range(TENANTS):
        await engine.tenant_add(f"t{t:03d}", limit)


async def _enqueue(engine: Engine, count: int, tag: str, *, send_at: float | None = None) -> float:
    """``count`` notifications spread over the tenants, ``CHUNK`` a call; returns seconds."""
    started = time.perf_counter()
    per = count // TENANTS
    for t in range(TENANTS):
        for first in range(0, per, CHUNK):
            items = [
                EnqueueItem("noop", f"u{i}@t{t}.example", {"i": i}, f"{tag}-{i}", send_at=send_at)
                for i in range(first, min(per, first + CHUNK))
            ]
            await engine.enqueue_many(f"t{t:03d}", items)
    return time.perf_counter() - started


async def _settle(store: Store) -> None:
    """What a store holding rows written long ago is like: SQLite's write-ahead log folded
    back into the file (else the drain pays for the fill's checkpoints), Postgres's table
    vacuumed and analysed (else autovacuum runs during the drain). Done in both cases."""
    import sqlalchemy as sa

    async def tx(conn: Any) -> None:
        if store.dialect == "sqlite":
            await conn.execute(sa.text("PRAGMA wal_checkpoint(TRUNCATE)"))
            await conn.execute(sa.text("ANALYZE"))

    await store._db.read(tx)
    if store.dialect != "sqlite":
        import asyncpg

        conn = await asyncpg.connect(asyncpg_dsn(store._db.url.render_as_string(False)))
        try:
            await conn.execute("VACUUM ANALYZE")
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()


def _worker_rss_mb(url: str, key: str, seconds: float = 6.0) -> float | None:
    """Run ``omnipost worker`` over ``url`` for ``seconds``; its peak resident set."""
    env = clean_env(Path(tempfile.mkdtemp(prefix="omnipost-lifetimes-")), OMNIPOST_KEYS=key)
    args = ["-m", "app", "worker", "--db", url, "--duration", str(seconds), "--quiet"]
    proc = subprocess.Popen([sys.executable, *args], env=env, cwd=REPO)
    peak = None
    while proc.poll() is None:
        seen = peak_rss_mb(proc.pid)
        peak = seen if seen is not None and (peak is None or seen > peak) else peak
        time.sleep(0.1)
    return None if peak is None else round(peak, 1)


async def drain_side_by_side(
    urls: tuple[str, str], due: int, scheduled: int, repeat: int
) -> dict[str, Any]:
    """The same drain on an empty store (``urls[0]``) and on one holding ``scheduled`` rows
    for tomorrow (``urls[1]``), ``repeat`` times, the sides alternating (each drain a new
    engine, its own rows); each store's worker memory after."""
    keys = [SecretBox.generate_key(), SecretBox.generate_key()]
    found: dict[str, Any] = {}
    rates: dict[str, list[float]] = {"empty": [], "scheduled": []}
    async with (
        open_store(urls[0], SecretBox([keys[0]])) as (empty, _),
        open_store(urls[1], SecretBox([keys[1]])) as (later, _),
    ):
        for store in (empty, later):
            async with _engine(store) as engine:
                await _setup(engine)
                if store is later:
                    send_at = time.time() + DAY_S
                    fill_s = await _enqueue(engine, scheduled, "later", send_at=send_at)
                    found["scheduled_fill_s"] = round(fill_s, 1)
            await _settle(store)
        for run in range(repeat):
            for label, store in (("empty", empty), ("scheduled", later)):
                async with _engine(store) as engine:
                    await _enqueue(engine, due, f"due{run}")
                    rates[label].append(await drain_rate(engine, due))
    for label, got in rates.items():
        found[f"{label}_per_s"] = spread(got, 0)
    found["ratio"] = round(
        statistics.median(rates["scheduled"]) / statistics.median(rates["empty"]), 3
    )
    for label, url, key in (("empty", urls[0], keys[0]), ("scheduled", urls[1], keys[1])):
        found[f"{label}_worker_rss_mb"] = await asyncio.to_thread(_worker_rss_mb, url, key)
    empty_rss, scheduled_rss = found["empty_worker_rss_mb"], found["scheduled_worker_rss_mb"]
    if empty_rss and scheduled_rss:
        found["rss_ratio"] = round(scheduled_rss / empty_rss, 3)
    return found


async def due_together(url: str, count: int, limit: Limit) -> dict[str, Any]:
    """``count`` rows over the tenants (each at ``limit``) scheduled for one second."""
    async with open_store(url) as (store, _box):
        engine = _engine(store, concurrency=64)
        async with engine:
            await _setup(engine, limit)
            send_at = time.time() + 15 + count / 20_000  # after the enqueue, whatever it takes
            fill_s = await _enqueue(engine, count, "together", send_at=send_at)
            await engine.start()
            while engine.telemetry.totals().delivered < count:
                if engine.failure:
                    raise RuntimeError(engine.failure)
                await asyncio.sleep(0.05)
            await engine.stop()
            lateness: list[float] = []
            excess: list[float] = []
            for t in range(TENANTS):
                log = await engine.deliveries(f"t{t:03d}", limit=count)
                sent = sorted(e.ts for e in log)
                for k, ts in enumerate(sent):
                    late = ts - send_at
                    lateness.append(late)
                    excess.append(late - max(0.0, (k + 1 - limit.burst) / limit.rate_per_s))
    lateness.sort()
    excess.sort()
    return {
        "count": count,
        "limit": str(limit),
        "fill_s": round(fill_s, 1),
        "lateness_p50_s": round(percentile(lateness, 50) or 0.0, 3),
        "lateness_p99_s": round(percentile(lateness, 99) or 0.0, 3),
        "imposed_last_s": round((count / TENANTS - limit.burst) / limit.rate_per_s, 3),
        "excess_p50_s": round(percentile(excess, 50) or 0.0, 3),
        "excess_p99_s": round(percentile(excess, 99) or 0.0, 3),
        "first_late_s": round(lateness[0], 3),
    }


async def main(args: Any) -> dict[str, Any]:
    log_level_warning()
    stores: dict[str, Any] = {}
    limit = Limit(20, 20)
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = (f"sqlite:///{tmp}/empty.db", f"sqlite:///{tmp}/scheduled.db")
        if args.only in (None, "drain"):
            stores.setdefault("sqlite", {})["drain"] = await drain_side_by_side(
                sqlite, args.due, args.scheduled, args.repeat
            )
        if args.only in (None, "together"):
            stores.setdefault("sqlite", {})["together"] = await due_together(
                f"sqlite:///{tmp}/together.db", args.together, limit
            )
    if not args.skip_pg and await pg_reachable():
        pg: dict[str, Any] = {}
        if args.only in (None, "drain"):
            async with fresh_pg("life_empty") as empty, fresh_pg("life_sched") as later:
                pg["drain"] = await drain_side_by_side(
                    (empty, later), args.due, args.scheduled, args.repeat
                )
        if args.only in (None, "together"):
            async with fresh_pg("life_together") as url:
                pg["together"] = await due_together(url, args.together, limit)
        stores["postgres"] = pg
    return {"bench": "lifetimes", "tenants": TENANTS, "stores": stores}


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--scheduled", type=int, default=1_000_000)
    p.add_argument("--due", type=int, default=50_000)
    p.add_argument("--together", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3, help="drains of each side, alternating")
    p.add_argument("--skip-pg", action="store_true")
    p.add_argument("--only", choices=("drain", "together"))
    args = p.parse_args()
    emit(asyncio.run(main(args)), args.out)
