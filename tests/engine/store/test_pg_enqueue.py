"""The Postgres enqueue, one statement (engine/store/pg_hot.py): a key the tenant used before
comes back as a duplicate with its id, even one that another transaction commits while the
enqueue waits on it (the statement's snapshot cannot see it); the tenant's counts follow the
rows; a listener hears each enqueue that inserted anything, and nothing of one that did not."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from engine import SecretBox
from engine.core.domain import NotificationState
from engine.store import Store
from engine.store.notify import CHANNEL
from testkit.support import new_notification

T0 = 1_700_000_000.0
pytestmark = pytest.mark.postgres


def dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def setup(store: Store) -> tuple[int, int]:
    await store.migrate()
    tenant = await store.config.tenant_add("acme", None, now=T0, actor="test")
    provider = await store.config.provider_add("p", "simulated", None, {}, {}, now=T0, actor="test")
    return tenant.id, provider.id


async def test_a_key_committed_elsewhere_while_the_enqueue_waits_is_a_duplicate(
    pg_url: str, box: SecretBox
) -> None:
    async with Store(pg_url, box) as store:
        tenant, provider = await setup(store)
        other = await asyncpg.connect(dsn(pg_url))
        try:
            # Another transaction inserts key "b" and holds it uncommitted.
            tx = other.transaction()
            await tx.start()
            row = await other.fetchrow(
                "INSERT INTO notifications (tenant_id, provider_id, recipient, payload,"
                " idempotency_key, priority, state, attempt, failures, max_attempts,"
                " available_at, enqueued_at) VALUES ($1, $2, $3, '{}', 'b', 0, 'queued', 0, 0,"
                " 5, $4, $4) RETURNING id",
                tenant,
                provider,
                box.encrypt("b@example.com"),
                T0,
            )
            items = [new_notification(provider, k) for k in ("a", "b", "c", "a")]
            enqueue = asyncio.create_task(store.queue.enqueue(tenant, items, now=T0))
            await asyncio.sleep(0.3)
            assert not enqueue.done()  # it waits on "b"
            await tx.commit()
            results = await asyncio.wait_for(enqueue, 10)
        finally:
            await other.close()
        assert [(r.idempotency_key, r.duplicate) for r in results] == [
            ("a", False),
            ("b", True),
            ("c", False),
            ("a", True),
        ]
        assert results[1].id == row["id"]
        assert results[0].id == results[3].id != results[2].id
        again = await store.queue.enqueue(
            tenant, [new_notification(provider, k) for k in ("c", "d")], now=T0
        )
        assert [(r.idempotency_key, r.duplicate, r.id) for r in again[:1]] == [
            ("c", True, results[2].id)
        ]
        assert not again[1].duplicate
        depth = {(r.tenant_id, r.state): r.count for r in await store.notifications.depth()}
        assert depth == {(tenant, NotificationState.QUEUED): 4}  # a, b, c, d


async def test_listeners_hear_each_enqueue_that_inserted(pg_url: str, box: SecretBox) -> None:
    async with Store(pg_url, box) as store:
        tenant, provider = await setup(store)
        heard: list[str] = []
        listener = await asyncpg.connect(dsn(pg_url))
        try:
            await listener.add_listener(CHANNEL, lambda *args: heard.append(args[3]))
            await store.queue.enqueue(tenant, [new_notification(provider, "x")], now=T0)
            await store.queue.enqueue(
                tenant, [new_notification(provider, k) for k in ("y", "z")], now=T0
            )
            await store.queue.enqueue(tenant, [new_notification(provider, "x")], now=T0)
            await asyncio.sleep(0.3)
        finally:
            await listener.close()
        # One NOTIFY per enqueue that inserted rows, carrying the store's origin; the
        # duplicate-only enqueue says nothing.
        assert heard == [store._db.origin] * 2


@pytest.mark.parametrize("varied", ["none", "provider", "priority", "attempts", "due"])
async def test_a_batch_alike_or_not_stores_each_row_as_given(
    pg_url: str, box: SecretBox, varied: str
) -> None:
    """Rows alike in provider, priority, attempts and due time go as one value each
    (``enqueue_sql(same=True)``); a batch where one differs, as arrays: both store each row's
    own values, in order."""
    async with Store(pg_url, box) as store:
        tenant, provider = await setup(store)
        other = await store.config.provider_add("q", "simulated", None, {}, {}, now=T0, actor="t")
        items = []
        for n in range(6):
            odd = n % 2 == 1
            items.append(
                new_notification(
                    other.id if odd and varied == "provider" else provider,
                    f"k{n}",
                    priority=7 if odd and varied == "priority" else 3,
                    max_attempts=9 if odd and varied == "attempts" else 4,
                    available_at=T0 + (50 if odd and varied == "due" else 20),
                )
            )
        results = await store.queue.enqueue(tenant, items, now=T0)
        conn = await asyncpg.connect(dsn(pg_url))
        try:
            rows = await conn.fetch(
                "SELECT id, provider_id, idempotency_key, priority, max_attempts, available_at,"
                " state FROM notifications ORDER BY id"
            )
        finally:
            await conn.close()
        assert [r["id"] for r in rows] == [r.id for r in results]
        columns = ("provider_id", "idempotency_key", "priority", "max_attempts", "available_at")
        assert [tuple(r[c] for c in columns) for r in rows] == [
            (i.provider_id, i.idempotency_key, i.priority, i.max_attempts, i.available_at)
            for i in items
        ]
        assert {r["state"] for r in rows} == {"queued"}


async def test_made_up_keys_skip_the_check_and_a_clash_is_still_a_duplicate(
    pg_url: str, box: SecretBox
) -> None:
    """``made_up=True`` inserts without ``ON CONFLICT``; should a made-up key be one the tenant
    used, the statement inserts nothing and the checked form answers it as a duplicate, the
    rest inserted once."""
    async with Store(pg_url, box) as store:
        tenant, provider = await setup(store)
        fresh = await store.queue.enqueue(
            tenant, [new_notification(provider, k) for k in ("m1", "m2")], now=T0, made_up=True
        )
        assert [(r.idempotency_key, r.duplicate) for r in fresh] == [("m1", False), ("m2", False)]
        clash = await store.queue.enqueue(
            tenant, [new_notification(provider, k) for k in ("m3", "m1")], now=T0, made_up=True
        )
        assert [(r.idempotency_key, r.duplicate) for r in clash] == [("m3", False), ("m1", True)]
        assert clash[1].id == fresh[0].id
        depth = {(r.tenant_id, r.state): r.count for r in await store.notifications.depth()}
        assert depth == {(tenant, NotificationState.QUEUED): 3}


def _scans_of(plan: dict[str, Any], table: str) -> list[tuple[str, int]]:
    """The plan's scans of ``table``: the index each reads (or the scan's kind) and how many
    times it ran."""
    own = []
    if plan.get("Relation Name") == table:
        own.append((plan.get("Index Name", plan["Node Type"]), plan["Actual Loops"]))
    return own + [scan for child in plan.get("Plans", []) for scan in _scans_of(child, table)]


@pytest.mark.parametrize("made_up", [False, True])
async def test_the_suppression_list_is_probed_once_a_row(
    pg_url: str, box: SecretBox, made_up: bool
) -> None:
    """Each row looks its recipient up on the tenant's list once, along the unique index,
    however long the list (the state, finished time and error all read the one answer)."""
    from engine.store import pg_hot

    async with Store(pg_url, box) as store:
        tenant, provider = await setup(store)
        conn = await asyncpg.connect(dsn(pg_url))
        try:
            await conn.execute(
                "INSERT INTO suppressions (tenant_id, provider_id, digest, recipient, source,"
                " created_at) SELECT $1, $2, md5(i::text) || md5(i::text), 'x', 'operator', 0"
                " FROM generate_series(1, 5000) AS i",
                tenant,
                provider,
            )
            await conn.execute("ANALYZE suppressions")
            recipients = [f"r{n}@example.com" for n in range(40)]
            digests = box.digest_columns(recipients)
            sql = pg_hot.enqueue_sql(len(digests), same=True, made_up=made_up)
            args: tuple[Any, ...] = (tenant, provider, box.encrypt_many(recipients), ["{}"] * 40)
            args += ([f"k{n}" for n in range(40)], 0, 5, T0, "queued", T0, "c", "o", None, "gone")
            text = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args, *digests)
            [plan] = json.loads(text)
        finally:
            await conn.close()
        unique = "uq_suppressions_tenant_id_digest_provider_id"
        assert _scans_of(plan["Plan"], "suppressions") == [(unique, 40)]
