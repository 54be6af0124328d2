"""A notification's tenant and provider must exist, and stay while it does (migration 0007).

On Postgres the foreign keys of ``notifications`` became statement-level triggers (one check
per insert, not per row); these tests hold them to what the foreign keys guaranteed: an
enqueue naming a tenant or provider that does not exist is refused whole (``NotFound``), a
change of a notification to one is refused, and a tenant or provider that notifications refer
to can neither be deleted nor renumbered. On SQLite the foreign keys themselves do it; the
same tests run there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from engine import SecretBox
from engine.core.errors import NotFound
from engine.store import Store
from testkit.support import new_notification

T0 = 1_700_000_000.0

Sql = Callable[[str], Awaitable[None]]


async def populated(store: Store) -> tuple[int, int]:
    """A store with one tenant, one provider and one notification of theirs."""
    tenant = await store.config.tenant_add("acme", None, now=T0, actor="test")
    provider = await store.config.provider_add("sms", "simulated", None, {}, {}, now=T0, actor="t")
    await store.queue.enqueue(tenant.id, [new_notification(provider.id, "k0")], now=T0)
    return tenant.id, provider.id


def sql_on(url: str) -> Sql:
    """Runs one statement on the store at ``url`` outside OmniPost (as an operator's psql or
    sqlite3 would), raising the driver's error."""

    async def run(statement: str) -> None:
        if url.startswith("sqlite"):
            with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute(statement)
            return
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    return run


REFUSED = (sqlite3.IntegrityError, asyncpg.ForeignKeyViolationError)


async def test_an_enqueue_naming_a_missing_tenant_or_provider_is_refused_whole(
    store_url: str, box: SecretBox
) -> None:
    async with Store(store_url, box) as store:
        await store.migrate()
        tenant_id, provider_id = await populated(store)
        good = new_notification(provider_id, "good")
        for tenant, provider in ((tenant_id + 100, provider_id), (tenant_id, provider_id + 100)):
            with pytest.raises(NotFound):
                await store.queue.enqueue(tenant, [good, new_notification(provider, "bad")], now=T0)
        kept = await store.notifications.list_by_tenant(tenant_id)
        assert [view.id for view in kept] == [1]  # the first one only: nothing half-written


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE notifications SET tenant_id = tenant_id + 100",
        "UPDATE notifications SET provider_id = provider_id + 100",
        "DELETE FROM tenants",
        "DELETE FROM providers",
        "UPDATE tenants SET id = id + 100",
        "UPDATE providers SET id = id + 100",
    ],
)
async def test_a_reference_cannot_be_broken_from_either_side(
    store_url: str, box: SecretBox, statement: str
) -> None:
    async with Store(store_url, box) as store:
        await store.migrate()
        await populated(store)
    with pytest.raises(REFUSED):
        await sql_on(store_url)(statement)


async def test_unreferenced_tenants_and_providers_can_go(store_url: str, box: SecretBox) -> None:
    """The checks refuse only what breaks a reference: no notification, no refusal."""
    async with Store(store_url, box) as store:
        await store.migrate()
        await populated(store)
        await store.config.tenant_add("idle", None, now=T0, actor="test")
    run = sql_on(store_url)
    await run("DELETE FROM tenants WHERE name = 'idle'")
    await run("UPDATE notifications SET priority = 5")  # no reference changed: not checked
    await run("DELETE FROM notifications")
    await run("DELETE FROM rate_limits")
    await run("DELETE FROM provider_health")
    await run("DELETE FROM tenants")


@pytest.mark.postgres
async def test_postgres_checks_references_per_statement(pg_url: str, box: SecretBox) -> None:
    """The foreign keys are gone from ``notifications`` on Postgres; the triggers replace them."""
    async with Store(pg_url, box) as store:
        await store.migrate()
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        fks = await conn.fetch(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'notifications'::regclass AND contype = 'f'"
        )
        triggers: list[Any] = await conn.fetch(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname"
        )
    finally:
        await conn.close()
    assert fks == []
    names = {row["tgname"] for row in triggers}
    assert {
        "tr_notifications_references_insert",
        "tr_notifications_references_update",
        "tr_tenants_in_use",
        "tr_providers_in_use",
    } <= names
