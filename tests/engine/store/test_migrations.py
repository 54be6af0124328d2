"""Alembic migrations: idempotent, identical to ``engine.store.schema``, checked before use."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from engine.core.crypto import SecretBox
from engine.core.errors import StoreError
from engine.store import Store, normalize_url
from engine.store import store as store_module
from engine.store.partial_indexes import PARTIAL_INDEXES
from engine.store.schema import metadata

# The newest revision, read from the migration scripts themselves.
HEAD = ScriptDirectory(str(Path(store_module.__file__).with_name("migrations"))).get_current_head()
T = TypeVar("T")


def _unquoted(default: str | None) -> str | None:
    return None if default is None else default.strip("()").strip("'\"")


def _same_server_default(
    _context: MigrationContext,
    _inspected_column: sa.Column[Any],
    _metadata_column: sa.Column[Any],
    inspected_default: str | None,
    _metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """Alembic reports SQLite's ``DEFAULT ''`` as differing from itself; compare those two
    ourselves and leave every other default to Alembic (None)."""
    if _unquoted(rendered_metadata_default) == "" and _unquoted(inspected_default) == "":
        return False
    return None


def _checked_by_triggers(
    obj: Any, _name: str | None, type_: str, _reflected: bool, _compare_to: Any
) -> bool:
    """False for the foreign keys of ``notifications``: on Postgres, migration 0007 checks them
    with statement-level triggers instead (``test_postgres_checks_references_per_statement``)."""
    return not (type_ == "foreign_key_constraint" and obj.table.name == "notifications")


def _diffs(sync_conn: sa.Connection) -> list[Any]:
    opts: dict[str, Any] = {"compare_type": True, "compare_server_default": _same_server_default}
    if sync_conn.dialect.name == "postgresql":
        opts["include_object"] = _checked_by_triggers
    return list(compare_metadata(MigrationContext.configure(sync_conn, opts=opts), metadata))


async def _on(url: str, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            return await fn(conn)
    finally:
        await engine.dispose()


async def _schema_diffs(url: str) -> list[Any]:
    async def run(conn: AsyncConnection) -> list[Any]:
        return await conn.run_sync(_diffs)

    return await _on(url, run)


async def _table_names(url: str) -> set[str]:
    async def run(conn: AsyncConnection) -> set[str]:
        return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))

    return await _on(url, run)


async def test_migrated_schema_matches_the_metadata(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        assert await store.migrate() == HEAD
    assert await _schema_diffs(store_url) == []
    assert sorted(index.name or "" for index in PARTIAL_INDEXES) == [
        "ix_notifications_finished",
        "ix_notifications_leased_expiry",
        "ix_notifications_leased_owner",
        "ix_notifications_queued_due",
        "ix_notifications_scheduled_due",
        "ix_notifications_waiting_expiry",
        "ix_status_events_due",
        "ix_status_events_finished",
        "ix_status_events_lease",
        "ix_status_events_undelivered",
    ]


async def test_the_comparison_sees_drift(store_url: str, box: SecretBox) -> None:
    """The check above can fail: a column the migrations do not know of is reported."""
    async with Store(store_url, box) as store:
        await store.migrate()

    async def drift(conn: AsyncConnection) -> None:
        await conn.execute(sa.text("ALTER TABLE tenants ADD COLUMN stray INTEGER"))
        await conn.commit()

    await _on(store_url, drift)
    diffs = await _schema_diffs(store_url)
    assert [d[0] for d in diffs] == ["remove_column"]
    assert diffs[0][3].name == "stray"


async def test_migrating_twice_is_a_no_op(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        assert await store.revision() is None
        assert await store.migrate() == HEAD
        await store.config.tenant_add("acme", None, now=0.0, actor="t")
        tables = await _table_names(store_url)
        assert tables == {*metadata.tables, "alembic_version"}

        assert await store.migrate() == HEAD
        assert await store.revision() == HEAD
        assert [t.name for t in await store.config.tenants()] == ["acme"]
    assert await _table_names(store_url) == tables

    async def versions(conn: AsyncConnection) -> list[str]:
        rows = await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
        return [r[0] for r in rows]

    assert await _on(store_url, versions) == [HEAD]


async def test_concurrent_migrations_agree(store_url: str, box: SecretBox) -> None:
    """Several processes may start at once; each brings the store up to date, none fails."""
    stores = [Store(store_url, box) for _ in range(3)]
    try:
        assert await asyncio.gather(*(s.migrate() for s in stores)) == [HEAD] * 3
    finally:
        for s in stores:
            await s.close()
    assert await _schema_diffs(store_url) == []


async def test_ensure_current_refuses_an_unmigrated_store(store_url: str, box: SecretBox) -> None:
    if store_url.startswith("sqlite:///"):
        Path(store_url.removeprefix("sqlite:///")).touch()  # an empty database file
    async with Store(store_url, box) as store:
        with pytest.raises(StoreError) as caught:
            await store.ensure_current()
        message = str(caught.value)
        assert message == (
            f"the store at {store.url_masked} is not migrated (at nothing, needs {HEAD}); "
            "run `omnipost migrate`."
        )
        assert "Traceback" not in message and "\n" not in message

        await store.migrate()
        await store.ensure_current()


async def test_a_missing_sqlite_file_is_not_created(tmp_path: Path, box: SecretBox) -> None:
    path = tmp_path / "typo.db"
    async with Store(f"sqlite:///{path}", box) as store:
        with pytest.raises(StoreError, match=r"there is no store at .*typo\.db; run `omnipost"):
            await store.ensure_current()
    assert not path.exists()


async def test_ensure_current_refuses_an_unknown_revision(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        await store.migrate()

    async def stamp(conn: AsyncConnection) -> None:
        await conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000'"))
        await conn.commit()

    await _on(store_url, stamp)
    async with Store(store_url, box) as store:
        with pytest.raises(StoreError, match=rf"is not migrated \(at 0000, needs {HEAD}\)"):
            await store.ensure_current()


def test_the_known_head_is_the_newest_script() -> None:
    """Commands check a store's revision against ``HEAD`` without loading the scripts."""
    scripts = ScriptDirectory.from_config(store_module._alembic_config())
    assert scripts.get_current_head() == store_module.HEAD


async def test_the_revision_is_read_as_alembic_reads_it(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        assert await store.revision() is None
        await store.migrate()
        assert await store.revision() == store_module.HEAD
    engine = create_async_engine(normalize_url(store_url))
    try:
        async with engine.connect() as conn:
            alembic_says = await conn.run_sync(
                lambda c: MigrationContext.configure(c).get_current_revision()
            )
    finally:
        await engine.dispose()
    assert alembic_says == store_module.HEAD
