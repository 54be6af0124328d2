"""The hot claim and acknowledgement run on the drivers themselves (``write_in_thread`` on
SQLite, ``write_on_driver`` on Postgres), so the drivers' own errors must come out as the
store's errors, as SQLAlchemy's do: a table of each kind, and the one retried (locked)."""

from __future__ import annotations

import functools
import logging
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from engine import SecretBox, Store
from engine.core.errors import Conflict, NotFound, StoreError, StoreUnavailable
from engine.store.translate import Locked, translated


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (sqlite3.OperationalError("database is locked"), Locked),
        (sqlite3.OperationalError("disk I/O error"), StoreUnavailable),
        (sqlite3.IntegrityError("FOREIGN KEY constraint failed"), NotFound),
        (sqlite3.IntegrityError("UNIQUE constraint failed: notifications.id"), Conflict),
        (sqlite3.DatabaseError("file is not a database"), StoreError),
        (asyncpg.DeadlockDetectedError("deadlock detected"), Locked),
        (asyncpg.SerializationError("could not serialize access"), Locked),
        (asyncpg.ForeignKeyViolationError("violates foreign key constraint"), NotFound),
        (asyncpg.UniqueViolationError("duplicate key value"), Conflict),
        (asyncpg.AdminShutdownError("terminating connection"), StoreUnavailable),
        (asyncpg.InterfaceError("connection is closed"), StoreUnavailable),
        (asyncpg.ConnectionDoesNotExistError("connection was closed"), StoreUnavailable),
        (asyncpg.InternalClientError("cannot switch to state 12"), StoreUnavailable),
        (asyncpg.UndefinedColumnError("column x does not exist"), StoreError),
    ],
)
async def test_driver_errors_become_the_stores_errors(
    raised: Exception, expected: type[Exception]
) -> None:
    with pytest.raises(expected) as caught:
        async with translated():
            raise raised
    assert caught.value.__cause__ is raised
    if isinstance(caught.value, StoreError):
        assert "Traceback" not in caught.value.message
        assert caught.value.message.endswith(".")


async def test_what_runs_on_sqlites_thread_is_logged_without_its_arguments(
    tmp_path: Path, box: SecretBox, caplog: pytest.LogCaptureFixture
) -> None:
    """aiosqlite logs what it runs at DEBUG; a call's arguments (a recipient, here) must not
    reach that log, whatever the caller hands ``write_in_thread``."""
    secret = "carol.secret@example.com"

    def probe(conn: sqlite3.Connection, recipient: str) -> int:
        return int(conn.execute("SELECT length(?)", (recipient,)).fetchone()[0])

    caplog.set_level(logging.DEBUG)
    async with Store(f"sqlite:///{tmp_path / 'o.db'}", box) as store:
        await store.migrate()
        got = await store._db.write_in_thread(functools.partial(probe, recipient=secret))
    assert got == len(secret)
    assert "executing" in caplog.text  # aiosqlite did log the call
    assert secret not in caplog.text
