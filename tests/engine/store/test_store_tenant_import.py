"""The store contract of ``ConfigRepo.tenant_import``, on SQLite and on Postgres through the
``store`` fixture: all or nothing, one audit entry, and a few statements however many tenants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import Limit
from engine.core.errors import ConfigError, Conflict
from engine.store import Store, TenantImport, TenantRecord, TenantSpec
from engine.store.config import _tenant
from engine.store.database import READ_PART, in_parts
from engine.store.schema import tenants

T0 = 1_700_000_000.0
ACTOR = "test"


async def state(store: Store) -> tuple[list[TenantRecord], list[Any]]:
    """Every tenant and every audit entry: what a refused import must leave as it was."""
    return await store.config.tenants(), await store.audit.entries(limit=1000)


@contextlib.contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """The SQL of every statement the store sends (an executemany counts once)."""
    seen: list[str] = []
    engine = store._db.engine.sync_engine

    def record(*args: Any) -> None:
        seen.append(args[2])

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_import_adds_new_tenants_and_updates_existing_ones(store: Store) -> None:
    cfg = store.config
    acme = await cfg.tenant_add("acme", Limit(10, 20), now=T0, actor=ACTOR)
    beta = await cfg.tenant_add("beta", None, enabled=False, now=T0, actor=ACTOR)
    specs = [
        TenantSpec("gamma", Limit(2.5, 5), line=1),
        TenantSpec("acme", None, enabled=False, line=2),  # limited and enabled: now neither
        TenantSpec("delta", None, enabled=False, line=4),
        TenantSpec("beta", Limit(1, 1), line=5),  # unlimited and disabled: now both
    ]

    done = await cfg.tenant_import(specs, update=True, now=T0 + 1, actor=ACTOR)

    assert done == TenantImport(added=2, updated=2)
    got = {t.name: (t.limit, t.enabled) for t in await cfg.tenants()}
    assert got == {
        "acme": (None, False),
        "beta": (Limit(1, 1), True),
        "delta": (None, False),
        "gamma": (Limit(2.5, 5), True),
    }
    # Updated in place: the tenants keep their ids (their notifications refer to them).
    assert (await cfg.tenant("acme")).id == acme.id
    assert (await cfg.tenant("beta")).id == beta.id


async def test_an_existing_tenant_without_update_is_refused_and_nothing_written(
    store: Store,
) -> None:
    cfg = store.config
    await cfg.tenant_add("acme", Limit(10, 20), now=T0, actor=ACTOR)
    before = await state(store)
    specs = [TenantSpec("fresh", None, line=1), TenantSpec("acme", Limit(1, 1), line=3)]

    with pytest.raises(Conflict) as caught:
        await cfg.tenant_import(specs, now=T0 + 1, actor=ACTOR)

    assert caught.value.message.startswith("line 3: tenant 'acme' already exists;")
    assert "--update" in caught.value.message
    assert await state(store) == before  # not even "fresh", line 1


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        (
            [TenantSpec("ok", line=1), TenantSpec("bad name", line=2)],
            "line 2: tenant name 'bad name' is not valid",
        ),
        (
            [TenantSpec("ok", line=1), TenantSpec("b", line=2), TenantSpec("ok", line=7)],
            "line 7: tenant 'ok' is on line 1 already",
        ),
        ([TenantSpec("ok"), TenantSpec("ok")], "tenant 'ok' is given twice"),
    ],
    ids=["bad-name", "repeated", "repeated-without-lines"],
)
async def test_bad_specs_are_refused_before_anything_is_written(
    store: Store, specs: list[TenantSpec], says: str
) -> None:
    await store.config.tenant_add("acme", None, now=T0, actor=ACTOR)
    before = await state(store)
    with pytest.raises(ConfigError) as caught:
        await store.config.tenant_import(specs, update=True, now=T0 + 1, actor=ACTOR)
    assert caught.value.message.startswith(says), caught.value.message
    assert caught.value.message.endswith(".")
    assert await state(store) == before


async def test_an_import_is_one_audit_entry_of_its_counts(store: Store) -> None:
    cfg = store.config
    await cfg.tenant_add("acme", None, now=T0, actor="alice")
    specs = [TenantSpec(name) for name in ("acme", "b1", "b2", "b3")]

    await cfg.tenant_import(specs, update=True, now=T0 + 5, actor="bob")

    newest, *older = await store.audit.entries()
    assert (newest.ts, newest.actor, newest.action, newest.tenant_id) == (
        T0 + 5,
        "bob",
        "tenant.import",
        None,
    )
    assert newest.detail == {"added": 3, "updated": 1}
    assert [e.action for e in older] == ["tenant.add"]


async def test_no_specs_write_nothing(store: Store) -> None:
    before = await state(store)
    done = await store.config.tenant_import([], update=True, now=T0, actor=ACTOR)
    assert done == TenantImport(added=0, updated=0)
    assert await state(store) == before


async def test_thousands_of_tenants_take_a_few_statements(store: Store) -> None:
    """One insert and one update for every tenant (executemany), and one name lookup per
    thousand names: never a statement per tenant."""
    cfg = store.config
    first = [TenantSpec(f"t{n:04d}", Limit(1 + n % 7, 2)) for n in range(0, 2500, 2)]
    await cfg.tenant_import(first, now=T0, actor=ACTOR)
    every = [TenantSpec(f"t{n:04d}", Limit(3, 4 + n % 5), enabled=n % 3 > 0) for n in range(2500)]

    with statements(store) as seen:
        done = await cfg.tenant_import(every, update=True, now=T0 + 1, actor=ACTOR)

    assert done == TenantImport(added=1250, updated=1250)
    writes = [sql for sql in seen if not sql.lstrip().upper().startswith(("SELECT", "BEGIN"))]
    assert len(writes) == 3, writes  # the insert, the update, the audit entry
    assert len(seen) <= 3 + 3 + 2, seen  # and 3 lookups of names, BEGIN/COMMIT at most
    got = {t.name: (t.limit, t.enabled) for t in await cfg.tenants()}
    assert got == {s.name: (s.limit, s.enabled) for s in every}


async def test_many_tenants_read_in_parts_straight_from_the_driver(store: Store) -> None:
    """Past ``READ_PART`` rows: ``tenants()`` reads the driver's rows part by part (a cursor on
    Postgres) and makes the same records as SQLAlchemy's rows would, in order."""
    n = READ_PART * 2 + 7
    specs = [
        TenantSpec(f"t{i:05d}", Limit(1 + i % 3, 2) if i % 2 else None, enabled=i % 5 != 0, line=i)
        for i in range(n)
    ]
    await store.config.tenant_import(specs, now=T0, actor=ACTOR)
    got = await store.config.tenants()
    assert [t.name for t in got] == [s.name for s in specs]
    assert [(t.limit, t.enabled) for t in got] == [(s.limit, s.enabled) for s in specs]
    assert all(isinstance(t.enabled, bool) for t in got)

    async def through_sqlalchemy(conn: AsyncConnection) -> list[TenantRecord]:
        query = sa.select(tenants).order_by(tenants.c.name)
        return await in_parts(conn, query, _tenant)

    assert await store._db.read(through_sqlalchemy) == got
