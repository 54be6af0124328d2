"""A listing reads one index range per state; it must see one snapshot, or a notification that
changes state between two of those reads is missed or listed twice (seen on Postgres, where each
statement of a READ COMMITTED transaction has its own snapshot)."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from engine import Store
from testkit.support import new_notification

COUNT = 8


@pytest.mark.slow
async def test_a_listing_sees_every_row_once_while_rows_change_state(store: Store) -> None:
    tenant = await store.config.tenant_add("acme", None, now=1.0, actor="t")
    provider = await store.config.provider_add("f", "file", None, {}, {}, now=1.0, actor="t")
    items = [new_notification(provider.id, f"k{i}") for i in range(COUNT)]
    await store.queue.enqueue(tenant.id, items, now=1.0)
    flipping = True

    async def flip() -> None:
        """Move every row queued -> leased -> queued, over and over, each its own commit."""
        states = ("leased", "queued")
        n = 0
        while flipping:
            async with store._db.engine.begin() as conn:
                await conn.execute(
                    sa.text("UPDATE notifications SET state = :s WHERE tenant_id = :t"),
                    {"s": states[n % 2], "t": tenant.id},
                )
            n += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(flip())
    try:
        for _ in range(200):
            listed = await store.notifications.list_by_tenant(tenant.id, limit=1000)
            assert sorted(v.idempotency_key for v in listed) == sorted(
                f"k{i}" for i in range(COUNT)
            )
    finally:
        flipping = False
        await task
