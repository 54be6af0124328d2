"""The renewal and the reaper find leases through the partial lease indexes (migration 0006).

Those indexes hold leased rows only, so that an enqueue and an acknowledgement write no entry
in them. A query reaches a partial index only when its text implies the index's predicate:
``state = 'leased'`` as a literal (``leases.LEASED_ONLY``); with the state as a parameter, a
Postgres prepared statement's generic plan would read the whole table instead (SQLite
prepares again with the bound values, so it finds the index either way). Checked on SQLite
(``EXPLAIN QUERY PLAN``) and on Postgres (both plans a prepared statement may use), on a
store with history: delivered rows, queued rows and a few leases.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg

from engine import SecretBox
from engine.store import Completion, Leased, Store
from engine.store.leases import reap_statement, renew_statement
from testkit.support import delivered_at, new_notification

T0 = 1_700_000_000.0
OWNER = "worker-1"


def delivered(leased: Leased) -> Completion:
    return delivered_at(leased, T0 + 1)


async def store_with_history(url: str, box: SecretBox) -> None:
    """3,000 notifications: 2,560 delivered, 32 leased to OWNER, the rest queued."""
    async with Store(url, box) as store:
        await store.migrate()
        tenant = await store.config.tenant_add("acme", None, now=T0, actor="test")
        provider = await store.config.provider_add(
            "p", "simulated", None, {}, {}, now=T0, actor="test"
        )
        items = [new_notification(provider.id, f"k{i}") for i in range(3_000)]
        await store.queue.enqueue(tenant.id, items, now=T0)
        for _ in range(80):
            leased = await store.queue.claim(
                tenant.id, provider.id, 32, owner=OWNER, lease_s=30.0, now=T0
            )
            assert all(await store.queue.complete([delivered(i) for i in leased], worker=OWNER))
        held = await store.queue.claim(tenant.id, provider.id, 32, owner=OWNER, lease_s=30, now=T0)
        assert len(held) == 32
        assert await store.queue.renew(OWNER, lease_s=30.0, now=T0) == 32  # the real call


def statements(*, is_sqlite: bool = False) -> dict[str, tuple[sa.Update, str]]:
    """Each statement, as the store sends it, with the index it must read."""
    renew = renew_statement(OWNER, T0 + 60, is_sqlite=is_sqlite)
    return {
        "renew": (renew, "ix_notifications_leased_owner"),
        "reap": (reap_statement(T0 + 60), "ix_notifications_leased_expiry"),
    }


def pg_indexes(node: dict[str, Any]) -> set[str]:
    """The indexes and sequential scans of ``notifications`` in a JSON plan, node and below."""
    found = set()
    if node.get("Relation Name") == "notifications" and node["Node Type"] == "Seq Scan":
        found.add("seq scan")
    if node.get("Index Name", "").startswith(("ix_notifications", "pk_notifications")):
        found.add(node["Index Name"])
    for child in node.get("Plans", []):
        found |= pg_indexes(child)
    return found


def pg_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("name", ["renew", "reap"])
async def test_postgres_reads_the_leases_through_their_index(
    pg_url: str, box: SecretBox, mode: str, name: str
) -> None:
    """Through ``PREPARE`` and ``EXPLAIN EXECUTE``, so that ``plan_cache_mode`` picks the plan
    explained (an ``EXPLAIN`` given parameters plans with their values, as a custom plan)."""
    await store_with_history(pg_url, box)
    statement, index = statements()[name]
    compiled = statement.compile(dialect=pg_asyncpg.dialect())  # type: ignore[no-untyped-call]
    values = ", ".join(pg_literal(compiled.params[key]) for key in compiled.positiontup or ())
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("ANALYZE notifications")  # as autovacuum does, by now
        await conn.execute(f"SET plan_cache_mode = {mode}")
        await conn.execute("PREPARE probe AS " + compiled.string)
        explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE probe({values})")
    finally:
        await conn.close()
    found = pg_indexes(json.loads(explained)[0]["Plan"])
    assert index in found and "seq scan" not in found, found


@pytest.mark.parametrize("name", ["renew", "reap"])
async def test_sqlite_reads_the_leases_through_their_index(
    tmp_path: Any, box: SecretBox, name: str
) -> None:
    path = tmp_path / "leases.db"
    await store_with_history(f"sqlite:///{path}", box)
    statement, index = statements(is_sqlite=True)[name]
    compiled = statement.compile(dialect=sqlite.dialect())
    params = [compiled.params[key] for key in compiled.positiontup or ()]
    con = sqlite3.connect(path)
    try:
        con.execute("ANALYZE")
        plan = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + compiled.string, params)]
    finally:
        con.close()
    assert any(f"USING INDEX {index}" in step for step in plan), plan
    assert not any(step.startswith("SCAN notifications") for step in plan), plan
