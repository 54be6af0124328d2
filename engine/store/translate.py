"""The store's errors as OmniPost's: what SQLAlchemy, sqlite3 and asyncpg raise, translated into
``NotFound``, ``Conflict``, ``StoreUnavailable`` and ``StoreError`` (one sentence each), and
``Locked`` for a lock or a deadlock that the store retries."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NoReturn

from sqlalchemy import exc

from engine.core.errors import Conflict, NotFound, StoreError, StoreUnavailable

__all__ = ["Locked", "first_line", "pg_lost", "translated"]


class Locked(Exception):
    """A lock or a deadlock: the statement may be tried again."""


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    try:
        yield
    except exc.IntegrityError as err:
        if "foreign key" in str(err.orig).lower():
            raise NotFound("that refers to a tenant or provider that does not exist.") from err
        raise Conflict("that item already exists.") from err
    except exc.DBAPIError as err:
        text = str(err.orig)
        if (
            "database is locked" in text
            or "deadlock detected" in text
            or "could not serialize" in text
        ):
            raise Locked from err
        if err.connection_invalidated or isinstance(err, exc.InterfaceError):
            raise StoreUnavailable("the store connection was lost.") from err
        if isinstance(err, exc.OperationalError):
            raise StoreUnavailable(f"the store cannot be reached: {first_line(err.orig)}.") from err
        raise StoreError(f"the store refused a statement: {first_line(err.orig)}.") from err
    except sqlite3.Error as err:  # raised on the driver's thread (``write_in_thread``)
        _translate_sqlite(err)
    except _asyncpg_errors() as err:  # none unless a Postgres store loaded asyncpg
        _translate_asyncpg(err)
    except (OSError, ConnectionError) as err:
        raise StoreUnavailable(f"the store cannot be reached: {err.strerror or err}.") from err
    except exc.SQLAlchemyError as err:
        raise StoreError(f"the store failed: {first_line(err)}.") from err


def _translate_sqlite(err: sqlite3.Error) -> NoReturn:
    """``sqlite3``'s own errors, as ``_translated`` says SQLAlchemy's."""
    if isinstance(err, sqlite3.IntegrityError):
        if "foreign key" in str(err).lower():
            raise NotFound("that refers to a tenant or provider that does not exist.") from err
        raise Conflict("that item already exists.") from err
    if isinstance(err, sqlite3.OperationalError):
        if "database is locked" in str(err):
            raise Locked from err
        raise StoreUnavailable(f"the store cannot be reached: {first_line(err)}.") from err
    raise StoreError(f"the store refused a statement: {first_line(err)}.") from err


def _asyncpg_errors() -> tuple[type[Exception], ...]:
    """asyncpg's own error types once it is loaded (by a Postgres store's connection), else
    none: nothing on SQLite can raise them, and a command on SQLite need not import it."""
    pg = sys.modules.get("asyncpg")
    if pg is None:
        return ()
    return (pg.PostgresError, pg.InterfaceError, pg.InternalClientError)


def pg_lost() -> tuple[type[Exception], ...]:
    """What asyncpg raises when the server ended the session (terminated, shut down,
    restarting); asyncpg is loaded when this is asked."""
    import asyncpg

    return (asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError)


def _translate_asyncpg(err: Exception) -> NoReturn:
    """asyncpg's own errors (``_asyncpg_errors``), as ``_translated`` says SQLAlchemy's."""
    import asyncpg  # loaded: ``err`` is one of its errors

    if isinstance(err, asyncpg.ForeignKeyViolationError):
        raise NotFound("that refers to a tenant or provider that does not exist.") from err
    if isinstance(err, asyncpg.UniqueViolationError):
        raise Conflict("that item already exists.") from err
    if isinstance(err, (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)):
        raise Locked from err
    lost = (*pg_lost(), asyncpg.InterfaceError, asyncpg.InternalClientError)
    if isinstance(err, lost):
        raise StoreUnavailable("the store connection was lost.") from err
    raise StoreError(f"the store refused a statement: {first_line(err)}.") from err


def first_line(err: object) -> str:
    """The driver's message, shortened, without a final period (callers end the sentence)."""
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200].rstrip(".")
