"""Wake-ups across processes: Postgres LISTEN/NOTIFY on enqueue. SQLite has none; workers poll.

``QueueRepo.enqueue`` (and a dead-letter retry) NOTIFY the channel inside their transaction, so
the signal goes out exactly when the rows become visible. The payload names the store that sent
it, whose own listener skips it: that process knows what it enqueued.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL

__all__ = ["CHANNEL", "connect_args", "listen"]

log = logging.getLogger(__name__)

CHANNEL = "omnipost_enqueue"


def connect_args(url: URL) -> dict[str, Any]:
    """``asyncpg.connect``'s arguments for ``url``, read as the store's pool reads it (so
    ``?ssl=require`` or a socket folder in ``?host=`` apply here too), minus the options that
    SQLAlchemy's driver keeps for itself."""
    from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

    dialect: Any = PGDialect_asyncpg  # untyped in SQLAlchemy
    _, kwargs = dialect().create_connect_args(url.set(drivername="postgresql+asyncpg"))
    for own in (
        "async_creator_fn",
        "prepared_statement_cache_size",
        "prepared_statement_name_func",
    ):
        kwargs.pop(own, None)
    return dict(kwargs)


async def listen(
    url: URL, on_notify: Callable[[], None], *, ignore: str = "", retry_s: float = 2.0
) -> None:
    """Call ``on_notify`` on every NOTIFY whose payload is not ``ignore`` (a store's own, see
    ``Database.origin``) until cancelled, reconnecting when the connection is lost. Returns at
    once for SQLite."""
    if url.get_backend_name() != "postgresql":
        return
    import asyncpg  # the Postgres extra; only reached with a Postgres store

    while True:
        lost = asyncio.Event()
        try:
            conn = await asyncpg.connect(**connect_args(url), timeout=10)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            log.info("cannot LISTEN for enqueues (polling meanwhile): %s", exc)
            await asyncio.sleep(retry_s)
            continue
        try:
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            await conn.add_listener(CHANNEL, functools.partial(_notified, on_notify, ignore))
            on_notify()  # anything enqueued while we were not listening
            await lost.wait()
            log.info("LISTEN connection lost; reconnecting")
        finally:
            if not conn.is_closed():
                await conn.close(timeout=2)


def _notified(
    on_notify: Callable[[], None], ignore: str, _conn: Any, _pid: int, _channel: str, payload: str
) -> None:
    if not ignore or payload != ignore:
        on_notify()
