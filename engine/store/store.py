"""The store: one database, its migrations, and the repositories over it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.errors import StoreError
from engine.store.api_keys import ApiKeyRepo
from engine.store.audit import AuditRepo
from engine.store.circuits import CircuitsRepo
from engine.store.config import ConfigRepo
from engine.store.database import Database, masked_url, normalize_url
from engine.store.endpoints import EndpointsRepo
from engine.store.lifetimes import LifetimesRepo
from engine.store.maintenance import MaintenanceRepo
from engine.store.notifications import NotificationsRepo
from engine.store.notify import listen
from engine.store.outbox import OutboxRepo
from engine.store.overview import OverviewReads
from engine.store.queue import QueueRepo
from engine.store.requests import RequestRepo
from engine.store.rotation import RotationRepo
from engine.store.stats import StatsRepo
from engine.store.status_events import StatusEventsRepo
from engine.store.suppressions import SuppressionRepo
from engine.store.workers import WorkersRepo

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD", "Store"]

log = logging.getLogger(__name__)
_MIGRATIONS = Path(__file__).with_name("migrations")
# The newest migration's revision (tests/engine/store/test_migrations.py checks it against the
# scripts):
# known here, so that a command checks the store's revision without importing Alembic, which
# only ``migrate`` needs.
HEAD = "0012"


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


class Store:
    """``async with Store(url, box) as store``; call ``migrate()`` before first use."""

    def __init__(self, url: str, box: SecretBox, *, pool_size: int = 10) -> None:
        self._db = Database(normalize_url(url), pool_size=pool_size)
        self.config = ConfigRepo(self._db, box)
        self.workers = WorkersRepo(self._db)
        self.audit = AuditRepo(self._db)
        self.queue = QueueRepo(self._db, box)  # as the dispatcher uses it
        self.notifications = NotificationsRepo(self._db, box)  # as people see them, repairs
        self.lifetimes = LifetimesRepo(self._db)  # scheduled rows falling due, deadlines passing
        self.stats = StatsRepo(self._db)
        self.circuits = CircuitsRepo(self._db)
        self.maintenance = MaintenanceRepo(self._db)
        self.rotation = RotationRepo(self._db, box)
        self.overview = OverviewReads(self._db, box)  # a console's reads over many tenants
        self.api_keys = ApiKeyRepo(self._db)  # tenants' API keys, hashed
        self.requests = RequestRepo(self._db)  # the HTTP API's idempotency keys
        self.suppressions = SuppressionRepo(self._db, box)  # each tenant's suppression list
        self.endpoints = EndpointsRepo(self._db, box)  # each tenant's for status events
        self.status_events = StatusEventsRepo(self._db, box)  # the outbox, as couriers use it
        self.outbox = OutboxRepo(self._db)  # the outbox, as operators see it

    @property
    def dialect(self) -> str:
        return self._db.dialect

    @property
    def url_masked(self) -> str:
        return masked_url(self._db.url)

    async def listen(self, on_notify: Callable[[], None]) -> None:
        """Call ``on_notify`` whenever another process (another ``Store``) enqueues or retries
        dead letters (Postgres); returns at once on SQLite, where workers poll."""
        await listen(self._db.url, on_notify, ignore=self._db.origin)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._db.dispose()

    async def migrate(self) -> str:
        """Bring the schema up to date; safe to run from several processes at once.
        Returns the revision the store is at."""

        async def tx(conn: AsyncConnection) -> str:
            if not self._db.is_sqlite:  # SQLite's BEGIN IMMEDIATE already serialises this
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(7406201)"))
            await conn.run_sync(_upgrade)
            return await conn.run_sync(_current)

        revision = await self._db.write(tx)
        if await self._db.compact():
            log.info("the store now gives freed pages back to the file system")
        return revision

    async def revision(self) -> str | None:
        """The schema revision in the store, or None when it was never migrated."""

        async def tx(conn: AsyncConnection) -> str | None:
            return await conn.run_sync(_current_or_none)

        return await self._db.read(tx)

    async def ensure_current(self) -> None:
        """Raise StoreError unless the schema is at the newest revision."""
        head = HEAD
        missing = _missing_sqlite_file(self._db.url.database) if self._db.is_sqlite else None
        if missing:
            # Checked before connecting: SQLite would create an empty file at a mistyped path.
            raise StoreError(
                f"there is no store at {missing}; run `omnipost migrate` to create it."
            )
        current = await self.revision()
        if current != head:
            raise StoreError(
                f"the store at {self.url_masked} is not migrated (at {current or 'nothing'}, "
                f"needs {head}); run `omnipost migrate`."
            )

    def __repr__(self) -> str:
        return f"Store({self.url_masked})"


def _missing_sqlite_file(path: str | None) -> str | None:
    """``path`` when no file is there (a quick stat, fine on the loop)."""
    return path if path and not Path(path).exists() else None


def _upgrade(sync_conn: sa.Connection) -> None:
    from alembic import command

    cfg = _alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")


def _current_or_none(sync_conn: sa.Connection) -> str | None:
    """Alembic's ``MigrationContext.get_current_revision``, read without Alembic."""
    if not sa.inspect(sync_conn).has_table("alembic_version"):
        return None
    found = sync_conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(found) > 1:
        raise StoreError(f"the store has more than one schema revision ({', '.join(found)}).")
    return found[0] if found else None


def _current(sync_conn: sa.Connection) -> str:
    return _current_or_none(sync_conn) or ""
