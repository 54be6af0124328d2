"""Retention on a store with a month of history: one prune pass, and a file that stops growing.

On a SQLite store (and, with ``--stores sqlite,postgres``, a fresh Postgres database too):

- ``month``: ``--per-day`` delivered notifications a day, each with its delivery-log row, for
  each of the past 30 days (bulk-inserted in SQL, timestamps in the past), with retention at 1
  day for deliveries and the log. One ``Engine.prune()`` pass: how long it took, the rows it
  deleted, how many finished rows are left and whether any left is older than a day (none may
  be), and the store's size before and after.
- ``cycles``: ``--cycles`` rounds of "a day of traffic" (``--per-day`` rows, delivered a day
  and a half ago, so the window has passed) followed by one prune pass; the store's size after
  each round. With retention in force, the size must stop growing after the first round:
  SQLite's incremental auto-vacuum hands the freed pages back to the file system.

Prints JSON. Usage::

    .venv/bin/python bench/retention.py [--per-day 10000] [--cycles 6] [--stores sqlite]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, fresh_pg, new_engine, open_store, parser, pg_reachable
from deep_store import sql

from engine import SecretBox

DAY_S = 86400.0
COLUMNS = (
    "tenant_id, provider_id, recipient, payload, idempotency_key, priority, state, attempt,"
    " failures, max_attempts, available_at, enqueued_at, finished_at"
)
# ``count`` delivered rows spread evenly over [start, start + span), keys prefixed per round so
# that rounds never collide, ~300-byte payloads as a real notification's; then their log rows.
SQLITE_FILL = (
    "WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < :n - 1) "
    f"INSERT INTO notifications ({COLUMNS}) SELECT :tenant, :provider, :token, "
    "'{\"text\":\"' || hex(randomblob(140)) || '\"}', :prefix || x, 0, 'delivered', 1, 0, 5,"
    " t, t, t + 0.2 FROM (SELECT x, :start + :span * x / :n AS t FROM g)"
)
PG_FILL = (
    f"INSERT INTO notifications ({COLUMNS}) SELECT $1, $2, $3, "
    "'{\"text\":\"' || md5(random()::text) || repeat('x', 250) || '\"}', $4 || g, 0, "
    "'delivered', 1, 0, 5, t, t, t + 0.2 FROM generate_series(0, $5 - 1) g, "
    "LATERAL (SELECT $6::float8 + $7::float8 * g / $5 AS t) s"
)
LOG = (
    "INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt, outcome,"
    " detail, worker, ts, latency_s) SELECT id, tenant_id, provider_id, 1, 'delivered', '',"
    " 'bench', finished_at, 0.2 FROM notifications WHERE idempotency_key LIKE {prefix}"
)


async def fill(
    url: str, ids: tuple[int, int], token: str, rows: int, start: float, span: float, prefix: str
) -> None:
    """``rows`` delivered notifications spread over [start, start + span), and their log rows,
    in one transaction."""
    tenant_id, provider_id = ids
    if url.startswith("sqlite"):
        params = {"n": rows, "tenant": tenant_id, "provider": provider_id, "token": token}
        params |= {"start": start, "span": span, "prefix": prefix}
        insert: tuple[str, Any] = (SQLITE_FILL, params)
        log: tuple[str, Any] = (LOG.format(prefix="?"), (prefix + "%",))
    else:
        insert = (PG_FILL, (tenant_id, provider_id, token, prefix, rows, start, span))
        log = (LOG.format(prefix="$1"), (prefix + "%",))
    await sql(url, [("BEGIN", ()), insert, log, ("COMMIT", ())])


async def finished_left(url: str, now: float) -> dict[str, int]:
    """Delivered rows left, and how many of them are older than the 1-day window (a scan: this
    is the benchmark's check, not something the engine does)."""
    query = (
        "SELECT count(*), coalesce(sum(CASE WHEN finished_at < {cutoff} THEN 1 ELSE 0 END), 0)"
        " FROM notifications WHERE state = 'delivered'"
    )
    cutoff = "?" if url.startswith("sqlite") else "$1"
    [(left, old)] = await sql(url, [(query.format(cutoff=cutoff), (now - DAY_S,))], fetch=True)
    return {"delivered_left": int(left), "older_than_window": int(old)}


async def run_store(url: str, args: Any) -> dict[str, Any]:
    box = SecretBox([SecretBox.generate_key()])
    token = box.encrypt("customer@example.com")
    async with open_store(url, box) as (store, _), new_engine(store) as engine:
        await engine.provider_add("out", "simulated")
        tenant = await engine.tenant_add("history")
        ids = (tenant.id, engine.directory.provider_id("out") or 0)
        await engine.retention_set(delivered_s=DAY_S, log_s=DAY_S)
        now = time.time()
        t0 = time.perf_counter()
        await fill(url, ids, token, args.per_day * 30, now - 30 * DAY_S, 30 * DAY_S, "m")
        fill_s = time.perf_counter() - t0
        before = await engine.store_size()
        started = time.time()  # the pass's own "now": rows crossing the window later stay
        t0 = time.perf_counter()
        report = await engine.prune()
        prune_s = time.perf_counter() - t0
        after = await engine.store_size()
        month = {
            "rows": args.per_day * 30,
            "fill_s": round(fill_s, 1),
            "prune_s": round(prune_s, 2),
            "deleted": {"delivered": report.delivered, "delivery_log": report.delivery_log},
            "deleted_per_s": round((report.delivered + report.delivery_log) / prune_s),
            "freed_bytes": report.freed_bytes,
            "bytes_before": before.used_bytes,
            "bytes_after": after.used_bytes,
            **await finished_left(url, started),
        }
        sizes = []
        for cycle in range(args.cycles):
            start = time.time() - 1.5 * DAY_S
            await fill(url, ids, token, args.per_day, start, 3600.0, f"c{cycle}-")
            grown = (await engine.store_size()).used_bytes
            await engine.prune()
            sizes.append(
                {"after_fill": grown, "after_prune": (await engine.store_size()).used_bytes}
            )
    first, last = sizes[0]["after_prune"], sizes[-1]["after_prune"]
    return {
        "month": month,
        "cycles": sizes,
        "growth_after_first_cycle": round(last / first, 3) if first else None,
    }


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--per-day", type=int, default=10_000)
    p.add_argument("--cycles", type=int, default=6)
    p.add_argument("--stores", default="sqlite")
    args = p.parse_args()
    results: dict[str, Any] = {"benchmark": "retention", "per_day": args.per_day}
    for kind in args.stores.split(","):
        if kind == "sqlite":
            with tempfile.TemporaryDirectory(prefix="omnipost-retention-") as tmp:
                results["sqlite"] = await run_store(f"sqlite:///{Path(tmp) / 'r.db'}", args)
        elif kind == "postgres" and await pg_reachable():
            async with fresh_pg("retention") as url:
                results["postgres"] = await run_store(url, args)
    emit(results, args.out)


if __name__ == "__main__":
    asyncio.run(main())
