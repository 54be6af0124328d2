"""Connections, transactions and error translation for SQLite (aiosqlite) and Postgres (asyncpg).

Nothing outside this package sees a SQLAlchemy or driver exception: ``Database.write`` and
``Database.read`` translate them into ``StoreError`` and its kin, retrying the transient ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from engine.core.errors import ConfigError, StoreError, StoreUnavailable
from engine.core.policy import STORE_RETRY
from engine.store.translate import Locked, pg_lost, translated

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

# asyncpg is imported where Postgres needs it, once a Postgres store connects: a command on
# SQLite starts without it.

__all__ = ["READ_PART", "Database", "in_parts", "masked_url", "normalize_url", "picked_once"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": None}
_RETRIES = 5
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def normalize_url(text: str) -> URL:
    """``sqlite:///PATH`` or ``postgresql://...`` (an explicit async driver is kept)."""
    try:
        url = make_url(text)
    except (exc.ArgumentError, ValueError) as err:  # a bad port is a ValueError
        raise ConfigError(
            "the store URL is not valid; use sqlite:///PATH or postgresql://USER@HOST/DB."
        ) from err
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"store URL scheme {backend!r} is not supported; use sqlite or postgresql."
        )
    driver = url.get_driver_name()
    if backend == "sqlite":
        if driver not in ("pysqlite", "aiosqlite"):
            raise ConfigError(f"SQLite driver {driver!r} is not supported; use sqlite:///PATH.")
        if not url.database or url.database == ":memory:":
            raise ConfigError("the SQLite store needs a file path: sqlite:///PATH.")
        return url.set(drivername="sqlite+aiosqlite")
    if driver not in ("psycopg", "psycopg2", "asyncpg"):
        raise ConfigError(f"Postgres driver {driver!r} is not supported; use postgresql://...")
    return url.set(drivername="postgresql+asyncpg")


def masked_url(url: URL | str) -> str:
    """The URL with its password hidden, for every output."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except (exc.ArgumentError, ValueError):
            return "<invalid URL>"
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


def picked_once(pick: sa.Select[Any], *, is_sqlite: bool) -> sa.Select[Any]:
    """What ``column IN (...)`` should test to touch exactly the rows ``pick`` selects.

    On Postgres ``pick`` locks them (``FOR UPDATE SKIP LOCKED``) in a materialized CTE: as a
    plain ``IN (subquery)`` the planner may run the subquery again for every outer row (a
    semi-join), each run skipping the rows the statement already changed and returning the
    next ones, so that ``LIMIT n`` no longer bounds what is claimed or deleted. On SQLite (one
    writer, no row locks) the subquery is used as it is."""
    if is_sqlite:
        return pick
    locked = pick.with_for_update(skip_locked=True).cte("picked")
    return sa.select(locked.prefix_with("MATERIALIZED").c[0])


class Database:
    """An async engine with transactions that retry on lock contention and dropped connections."""

    def __init__(self, url: URL, *, pool_size: int = 10) -> None:
        self.url = url
        self.dialect = url.get_backend_name()
        # This store's NOTIFY payload: its own listener skips them (the engine that enqueued
        # has counted its rows in already; see ``Dispatcher.enqueued``).
        self.origin = uuid.uuid4().hex
        # No pre-ping: it costs a round trip per transaction. A connection that died in the
        # pool fails its first statement, is invalidated, and ``_run`` retries on a fresh one.
        # No reset-on-return either: every transaction here ends in commit or rollback.
        kwargs: dict[str, Any] = {"pool_reset_on_return": None}
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {"timeout": 30.0}
        else:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.dialect == "sqlite":
            _install_sqlite_hooks(self.engine)
        # A read may take several statements (a listing reads one index range per state): on
        # Postgres they share one snapshot, or a row changing state between two of them would
        # be missed or seen twice. SQLite's read transaction is one snapshot already.
        read_options: dict[str, Any] = {"omnipost_read": True}
        if self.dialect == "postgresql":
            read_options["isolation_level"] = "REPEATABLE READ"
        self._reader = self.engine.execution_options(**read_options)
        # SQLite has one writer at a time. Queue this process's writers here rather than in
        # SQLite's busy handler, which sleeps in steps of up to 100 ms.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._raw = self.engine.execution_options(omnipost_no_transaction=True)  # built once
        self._lanes: dict[str, _Lane] = {}

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def insert(self, table: sa.Table) -> sqlite.Insert | postgresql.Insert:
        """``INSERT INTO table`` with this database's ``ON CONFLICT`` clauses. The dialect is
        imported here, on first use: Postgres's costs a command on SQLite 20 ms to import."""
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            return sqlite_insert(table)
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(table)

    async def dispose(self) -> None:
        for lane in self._lanes.values():
            async with lane.lock:
                if lane.conn is not None:
                    with contextlib.suppress(Exception):
                        await lane.conn.close()
                    lane.conn = None
        await self.engine.dispose()

    async def compact(self) -> bool:
        """SQLite: switch a store made before incremental auto-vacuum to it, with the one
        ``VACUUM`` that takes (it rewrites the file, so it runs once, at ``migrate``).
        Returns whether it did. Postgres: nothing."""

        async def run(conn: AsyncConnection) -> bool:
            mode = (await conn.exec_driver_sql("PRAGMA auto_vacuum")).scalar()
            if mode == _INCREMENTAL:
                return False
            await conn.exec_driver_sql(f"PRAGMA auto_vacuum={_INCREMENTAL}")
            await conn.exec_driver_sql("VACUUM")
            return True

        return await self.outside_transaction(run) if self.is_sqlite else False

    async def give_back_pages(self, pages: int) -> int:
        """SQLite: return up to ``pages`` free pages to the file system (incremental
        auto-vacuum, its own short write) and truncate the write-ahead log. Returns the bytes
        given back. Postgres: 0 (autovacuum keeps the space for reuse)."""

        async def run(conn: AsyncConnection) -> int:
            before = await _scalar(conn, "PRAGMA freelist_count")
            # Through the driver's executescript: sqlite3's execute steps a PRAGMA once, and
            # incremental_vacuum frees one page per step.
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.executescript(f"PRAGMA incremental_vacuum({pages})")
            freed = before - await _scalar(conn, "PRAGMA freelist_count")
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return freed * await _scalar(conn, "PRAGMA page_size")

        return await self.outside_transaction(run) if self.is_sqlite else 0

    async def outside_transaction(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """SQLite: run ``fn`` on a connection with no transaction open (for the statements
        SQLite refuses inside one), as this process's one writer."""
        assert self._write_lock is not None, "SQLite only"
        async with self._write_lock, translated(), self._raw.connect() as conn:
            return await fn(conn)

    async def write(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``fn`` in one write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
        if self._write_lock is None:
            return await self._run(self.engine, fn)
        async with self._write_lock:
            return await self._run(self.engine, fn)

    async def write_in_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: run ``fn`` on the driver's own thread with the ``sqlite3`` connection, as
        this process's one writer, in one trip there and back (``engine.store.sqlite_hot``
        says why). ``fn`` begins and ends its transaction itself; errors are translated and
        retried as ``write``'s are.

        aiosqlite has no public call for "run this on the connection's thread"; its
        ``_execute`` is that call (every public method goes through it). The contract tests
        run every claim and acknowledgement on SQLite through here, so an aiosqlite that
        changes it fails them rather than misbehaving. aiosqlite logs what it runs at DEBUG:
        ``fn`` goes to it inside a closure, whose repr names none of ``fn``'s arguments (a
        ``functools.partial``'s shows them all, recipients among them)."""
        assert self._write_lock is not None, "SQLite only"

        def unnamed(connection: sqlite3.Connection) -> T:
            return fn(connection)

        async def run(conn: AsyncConnection) -> T:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            try:
                result: T = await driver._execute(unnamed, driver._conn)
            except BaseException:
                if driver.in_transaction:  # its ROLLBACK failed too: never pool it like this
                    await conn.invalidate()
                raise
            return result

        async with self._write_lock:
            return await self._run(self._raw, run, transaction=False)

    async def write_on_driver(
        self, fn: Callable[[Any], Awaitable[T]], *, lane: str | None = None
    ) -> T:
        """Postgres: run ``fn`` with the asyncpg connection itself, outside any transaction, so
        that the one statement ``fn`` runs is a transaction of its own: one round trip instead
        of three (``engine.store.pg_hot`` says why). Errors are translated and retried as
        ``write``'s are; a connection that failed is dropped from the pool.

        ``lane`` names a caller that sends one statement at a time, again and again (the
        dispatcher's claims, the completer's acknowledgements): it keeps a connection of its
        own, checked out of the pool once, which saves the checkout and return each call
        costs (about 70 us of this loop's time here). While the lane is busy (another caller
        of the same name) or its connection fails, the call takes the pool's way."""
        if lane is not None:
            held = self._lanes.get(lane)
            if held is None:
                held = self._lanes[lane] = _Lane()
            if not held.lock.locked():
                async with held.lock:
                    try:
                        return await self._on_lane(held, fn)
                    except (StoreUnavailable, Locked):
                        pass  # its connection is gone (dropped), or a deadlock: the pool's way
                        # retries, as it does for any call
        return await self._on_pool(fn)

    async def _on_lane(self, held: _Lane, fn: Callable[[Any], Awaitable[T]]) -> T:
        async with translated():
            if held.conn is None:
                held.conn = await self.engine.connect()
            conn = held.conn
            driver = (await conn.get_raw_connection()).driver_connection
            import asyncpg  # Postgres only: loaded by its connection

            try:
                result: T = await fn(driver)
            except asyncpg.PostgresError as err:
                if isinstance(err, pg_lost()):
                    held.conn = None
                    await _drop(conn)
                raise
            except BaseException:
                held.conn = None  # lost, in a state the driver cannot say, or cancelled
                await _drop(conn)
                raise
            return result

    async def _on_pool(self, fn: Callable[[Any], Awaitable[T]]) -> T:

        async def run(conn: AsyncConnection) -> T:
            driver = (await conn.get_raw_connection()).driver_connection
            import asyncpg  # Postgres only: loaded by its connection

            try:
                result: T = await fn(driver)
            except asyncpg.PostgresError as err:
                if isinstance(err, pg_lost()):  # the server ended the session
                    await _invalidate(conn)
                raise
            except BaseException:
                # The connection was lost, the driver is in a state it cannot say, or the call
                # was cancelled mid-statement: such a connection never goes back to the pool.
                await _invalidate(conn)
                raise
            return result

        return await self._run(self.engine, run, transaction=False)

    async def read(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``fn`` in one read transaction (deferred on SQLite, so it never waits on writers)."""
        return await self._run(self._reader, fn)

    async def _run(
        self,
        engine: AsyncEngine,
        fn: Callable[[AsyncConnection], Awaitable[T]],
        *,
        transaction: bool = True,
    ) -> T:
        for attempt in range(1, _RETRIES + 1):
            delay_s = STORE_RETRY.delay_s(attempt)
            try:
                async with translated(), engine.connect() as conn:
                    if not transaction:
                        return await fn(conn)
                    async with conn.begin():
                        return await fn(conn)
            except StoreUnavailable:
                if attempt == _RETRIES:
                    raise
                log.info("store connection lost; retrying in %.2fs", delay_s)
            except Locked:
                if attempt == _RETRIES:
                    raise StoreError(
                        "the store stayed locked by other writers; try again."
                    ) from None
            await asyncio.sleep(delay_s)
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        return f"Database({masked_url(self.url)})"


class _Lane:
    """A connection held for one caller of ``write_on_driver`` (None until first used, and
    again after it failed), and the lock that keeps it to one statement at a time."""

    __slots__ = ("conn", "lock")

    def __init__(self) -> None:
        self.conn: AsyncConnection | None = None
        self.lock = asyncio.Lock()


async def _invalidate(conn: AsyncConnection) -> None:
    with contextlib.suppress(Exception):
        await conn.invalidate()


async def _drop(conn: AsyncConnection) -> None:
    """A held connection that failed: invalidated (never reused) and given back to the pool."""
    await _invalidate(conn)
    with contextlib.suppress(Exception):
        await conn.close()


async def _scalar(conn: AsyncConnection, sql: str) -> int:
    return int((await conn.exec_driver_sql(sql)).scalar() or 0)


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Let the begin hook below issue BEGIN itself, so writers take the lock up front.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # Before anything creates a table: a new store gives pages freed by retention back to
        # the file system (``Database.compact`` converts a store made before this).
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
        cursor.execute("PRAGMA journal_mode=WAL")
        # Checkpoints truncate the write-ahead log back to this size, so it does not keep the
        # size of the largest burst forever.
        cursor.execute("PRAGMA journal_size_limit=67108864")
        # Bounds the work of the ANALYZE that ``PRAGMA optimize`` may run (SQLite's advice).
        cursor.execute("PRAGMA analysis_limit=400")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        options = conn.get_execution_options()
        if options.get("omnipost_no_transaction", False):
            return  # VACUUM, which SQLite refuses inside a transaction
        conn.exec_driver_sql("BEGIN" if options.get("omnipost_read", False) else "BEGIN IMMEDIATE")


READ_PART = 5_000  # rows made into values between two turns of the event loop


async def in_parts(
    conn: AsyncConnection,
    query: sa.Select[Any],
    make: Callable[[Sequence[Any]], R],
    *,
    raw: bool = False,
) -> list[R]:
    """``make`` of every row of ``query``, ``READ_PART`` rows at a time with a turn of the
    event loop between parts: 400,000 rows are read without stalling the loop for a second
    (the driver fetches each part; the values are made here).

    ``raw``: ``make`` takes the driver's own rows and values (SQLite's booleans as 0 and 1,
    Postgres's sums of integers as ``Decimal``; no SQLAlchemy type processing), read
    straight from the driver in the same transaction: a tenth of the time per row that
    SQLAlchemy's rows cost (300,000 pair limits at an engine's start: 1.4 s on SQLite, half a
    second of it SQLAlchemy's). A query whose parameters are not plain numbers or text takes
    SQLAlchemy's way anyway."""
    if raw:
        compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        params = [compiled.params[name] for name in compiled.positiontup or ()]
        if all(isinstance(v, int | float | str) for v in params):
            return await _raw_in_parts(conn, compiled.string, params, make)
    found: list[R] = []
    result = await conn.stream(query)
    async for part in result.partitions(READ_PART):
        found += map(make, part)
        await asyncio.sleep(0)
    return found


async def _raw_in_parts(
    conn: AsyncConnection, sql: str, params: list[Any], make: Callable[[Sequence[Any]], R]
) -> list[R]:
    driver: Any = (await conn.get_raw_connection()).driver_connection
    found: list[R] = []
    if conn.dialect.name == "sqlite":  # aiosqlite: each fetch a turn on its thread
        cursor = await driver.execute(sql, params)
        try:
            while part := await cursor.fetchmany(READ_PART):
                found += map(make, part)
                await asyncio.sleep(0)
        finally:
            await cursor.close()
        return found
    # asyncpg: a cursor, a part a round trip (fetched whole, 300,000 records raised a worker's
    # peak memory by about 100 MB). A cursor needs a transaction: SQLAlchemy's starts at its
    # first statement, and this is the only one.
    async with contextlib.AsyncExitStack() as stack:
        if not driver.is_in_transaction():
            await stack.enter_async_context(driver.transaction(readonly=True))
        cursor = await driver.cursor(sql, *params)
        while part := await cursor.fetch(READ_PART):
            found += map(make, part)
            await asyncio.sleep(0)
    return found
