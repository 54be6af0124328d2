"""A store with thousands of tenants, written in one transaction: for the console's tests and
``bench/console.py --tenants N``.

``populate`` adds three ``simulated`` providers through the engine, then bulk-inserts the
tenants (rates 2-50/s, burst = rate), a pair limit for every (tenant, provider) when asked,
and ``queued`` due notifications per tenant in plain SQL into the store's own tables (the
count triggers keep ``queue_counts``), then refreshes the engine's directory. Names are
``t00000``, ``t00001``, ...
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass

from sqlalchemy.engine import make_url

from engine import Engine, Limit

__all__ = ["PROVIDERS", "Population", "populate", "tenant_limit", "tenant_name"]

PROVIDERS = ("sim-a", "sim-b", "sim-c")
PROVIDER_LIMIT = Limit(1000.0, 200.0)


@dataclass(frozen=True, slots=True)
class Population:
    tenants: int
    pair_limits: bool
    queued_per_tenant: int
    seconds: float


def tenant_name(i: int) -> str:
    return f"t{i:05d}"


def tenant_limit(i: int) -> Limit:
    """2-50/s, spread over the tenants; burst = one second's worth."""
    rate = float(2 + (i * 7) % 49)
    return Limit(rate, rate)


def _pair_rate(i: int, p: int) -> float:
    return max(1.0, tenant_limit(i).rate_per_s * (0.4 + 0.2 * p))


async def populate(
    engine: Engine,
    url: str,
    tenants: int,
    *,
    pair_limits: bool = True,
    queued: int = 0,
    latency_ms: int = 10,
    token: str = "",
) -> Population:
    """Providers (via the engine), then ``tenants`` tenants, pair limits and ``queued`` due
    notifications per tenant over the three providers (bulk SQL, one transaction); the
    engine's directory (and so its limiter) is refreshed afterwards. ``token`` is the
    recipient as stored (a SecretBox token: ``engine``'s box must open it)."""
    t0 = time.perf_counter()
    for name in PROVIDERS:
        options = {"latency_ms": str(latency_ms)}
        await engine.provider_add(name, "simulated", PROVIDER_LIMIT, options)
    provider_ids = [engine.directory.provider_id(p) or 0 for p in PROVIDERS]
    rows = _rows(tenants, provider_ids, pair_limits, queued, token)
    if url.startswith("sqlite"):
        await asyncio.to_thread(_sqlite_insert, make_url(url).database or "", *rows)
    else:
        await _pg_insert(url, *rows)
    await engine.directory.refresh()
    return Population(tenants, pair_limits, queued, time.perf_counter() - t0)


_Rows = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


def _rows(tenants: int, provider_ids: list[int], pairs: bool, queued: int, token: str) -> _Rows:
    now = time.time()
    tenant_rows: list[tuple[object, ...]] = []
    for i in range(tenants):
        limit = tenant_limit(i)
        tenant_rows.append((tenant_name(i), limit.rate_per_s, limit.burst, True, now))
    pair_rows: list[tuple[object, ...]] = []
    work: list[tuple[object, ...]] = []
    for i in range(tenants):
        for p, provider_id in enumerate(provider_ids):
            if pairs:
                rate = _pair_rate(i, p)
                pair_rows.append((tenant_name(i), provider_id, rate, rate))
        for j in range(queued):
            provider_id = provider_ids[j % len(provider_ids)]
            enqueued = now - 30 + j * 0.001
            work.append((tenant_name(i), provider_id, token, f"m{j}", enqueued))
    return tenant_rows, pair_rows, work


def _sqlite_insert(
    path: str,
    tenants: list[tuple[object, ...]],
    pairs: list[tuple[object, ...]],
    work: list[tuple[object, ...]],
) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.executemany(
            "INSERT INTO tenants (name, rate_per_s, burst, enabled, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            tenants,
        )
        con.executemany(
            "INSERT INTO rate_limits (tenant_id, provider_id, rate_per_s, burst) "
            "SELECT id, ?, ?, ? FROM tenants WHERE name = ?",
            [(p, r, b, t) for t, p, r, b in pairs],
        )
        con.executemany(
            "INSERT INTO notifications (tenant_id, provider_id, recipient, payload, "
            "idempotency_key, priority, state, attempt, failures, max_attempts, available_at, "
            "enqueued_at) SELECT id, ?, ?, '{}', ?, 0, 'queued', 0, 0, 5, ?, ? "
            "FROM tenants WHERE name = ?",
            [(p, tok, key, at, at, t) for t, p, tok, key, at in work],
        )
        con.execute("COMMIT")
        con.execute("ANALYZE")
    finally:
        con.close()


async def _pg_insert(
    url: str,
    tenants: list[tuple[object, ...]],
    pairs: list[tuple[object, ...]],
    work: list[tuple[object, ...]],
) -> None:
    import asyncpg

    u = make_url(url)
    conn = await asyncpg.connect(
        host=u.host, port=u.port or 5432, user=u.username, database=u.database, timeout=10
    )
    try:
        async with conn.transaction():
            await conn.executemany(
                "INSERT INTO tenants (name, rate_per_s, burst, enabled, created_at) "
                "VALUES ($1, $2, $3, $4, $5)",
                tenants,
            )
            ids = {r[1]: r[0] for r in await conn.fetch("SELECT id, name FROM tenants")}
            await conn.executemany(
                "INSERT INTO rate_limits (tenant_id, provider_id, rate_per_s, burst) "
                "VALUES ($1, $2, $3, $4)",
                [(ids[t], p, r, b) for t, p, r, b in pairs],
            )
            await conn.executemany(
                "INSERT INTO notifications (tenant_id, provider_id, recipient, payload, "
                "idempotency_key, priority, state, attempt, failures, max_attempts, "
                "available_at, enqueued_at) VALUES ($1, $2, $3, '{}', $4, 0, 'queued', 0, 0, 5, "
                "$5, $5)",
                [(ids[t], p, tok, key, at) for t, p, tok, key, at in work],
            )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
