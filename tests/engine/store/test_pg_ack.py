"""The Postgres acknowledgement (``pg_hot.DELIVER_SQL``) finds its rows by primary key.

Every state change leaves the row's old entries in the indexes on ``state`` and ``lease_owner``
until a vacuum. A plan that found the leases through those indexes (a bitmap over the owner's
and the leased state's entries, which the planner picked from its estimates) read every entry
a worker had left since the last vacuum: in one run here an acknowledgement of 32 took 1.4 ms
after 3,200 deliveries and 6.6 ms after 48,000. Through the primary key it reads 32 rows,
however much went before. Checked on both plans a prepared statement may use (custom and
generic), after a worker's worth of claims and acknowledgements.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from engine import SecretBox
from engine.store import Completion, Leased, Store, pg_hot
from testkit.support import delivered_at, new_notification

T0 = 1_700_000_000.0
OWNER = "worker-1"
pytestmark = pytest.mark.postgres


def dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def delivered(leased: Leased) -> Completion:
    return delivered_at(leased, T0 + 1)


def indexes_on_notifications(node: dict[str, Any]) -> set[str]:
    """The indexes of ``notifications`` that a JSON plan (node and below) scans."""
    found = set()
    if node.get("Index Name", "").startswith(("ix_notifications", "pk_notifications")):
        found.add(node["Index Name"])
    for child in node.get("Plans", []):
        found |= indexes_on_notifications(child)
    return found


def deliver_args(leased: list[Leased]) -> list[Any]:
    """``pg_hot.deliver``'s arguments for ``leased``, all delivered."""
    k = len(leased)
    return [
        [item.id for item in leased],
        [item.attempt for item in leased],
        T0 + 1,
        OWNER,
        OWNER,
        [""] * k,
        [T0 + 1] * k,
        [1.0] * k,
        [None] * k,
    ]


# The types of DELIVER_SQL's parameters, in order (what asyncpg infers when it prepares it).
DELIVER_TYPES = [
    "bigint[]", "integer[]", "float8", "text", "text", "text[]", "float8[]", "float8[]", "float8[]",
]  # fmt: skip


def literal(value: Any, pg_type: str) -> str:
    """``value`` written out as SQL of ``pg_type`` (the arguments here hold no quotes)."""
    if isinstance(value, list):
        return f"ARRAY[{', '.join(literal(v, pg_type[:-2]) for v in value)}]::{pg_type}"
    if value is None:
        return f"NULL::{pg_type}"
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_acknowledgement_reads_its_leases_by_primary_key(
    pg_url: str, box: SecretBox, mode: str
) -> None:
    async with Store(pg_url, box) as store:
        await store.migrate()
        tenant = await store.config.tenant_add("acme", None, now=T0, actor="test")
        provider = await store.config.provider_add(
            "p", "simulated", None, {}, {}, now=T0, actor="test"
        )
        items = [new_notification(provider.id, f"k{i}") for i in range(2_000)]
        await store.queue.enqueue(tenant.id, items, now=T0)
        for _ in range(40):  # a worker's claims and acknowledgements, no vacuum between
            leased = await store.queue.claim(
                tenant.id, provider.id, 32, owner=OWNER, lease_s=30.0, now=T0
            )
            applied = await store.queue.complete([delivered(i) for i in leased], worker=OWNER)
            assert all(applied)
        leased = await store.queue.claim(
            tenant.id, provider.id, 32, owner=OWNER, lease_s=30.0, now=T0
        )
        assert len(leased) == 32
        conn = await asyncpg.connect(dsn(pg_url))
        try:
            await conn.execute("ANALYZE notifications")  # as autovacuum does, by now
            await conn.execute(f"SET plan_cache_mode = {mode}")
            # PREPARE and EXPLAIN EXECUTE, so that plan_cache_mode picks the plan explained (an
            # EXPLAIN given parameters plans with their values, as a custom plan).
            await conn.execute(f"PREPARE ack({', '.join(DELIVER_TYPES)}) AS {pg_hot.DELIVER_SQL}")
            values = ", ".join(
                literal(v, t) for v, t in zip(deliver_args(leased), DELIVER_TYPES, strict=True)
            )
            explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE ack({values})")
        finally:
            await conn.close()
        plan = json.loads(explained)[0]["Plan"]
        assert indexes_on_notifications(plan) == {"pk_notifications"}
