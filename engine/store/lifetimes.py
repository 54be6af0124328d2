"""A notification's useful life in the store: scheduled rows queued when they fall due, and rows
whose deadline passed before anyone claimed them ended ``expired``.

A row enqueued with a send time ahead is inserted ``scheduled``: it is not counted as queued,
so the dispatcher's book, its looks and its claims never see it. ``promote`` queues the
scheduled rows that fell due, earliest first, a bounded part at a time, found through
``ix_notifications_scheduled_due`` (scheduled rows only); on Postgres it tells the other
processes, as an enqueue does. ``expire`` ends the queued and scheduled rows whose deadline
passed (a paused tenant's, an open circuit's: rows nobody claims), found through
``ix_notifications_waiting_expiry`` (unclaimed rows with a deadline only). Neither reads
anything in proportion to the queue or its history. Claims expire the rows they find past
their deadline themselves (``sqlite_hot.CLAIM_SQL``), so the sweep is for what is left.

Both are conditional updates (Postgres: rows picked with ``FOR UPDATE SKIP LOCKED``): many
workers may run them at once, and a row is promoted or expired once. The count triggers move
each row between the counts in the same transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import EXPIRED_DETAIL, NotificationState
from engine.store.database import Database, picked_once
from engine.store.notify import CHANNEL
from engine.store.schema import notifications

__all__ = ["SWEEP_PART", "LifetimesRepo"]

N = notifications
SWEEP_PART = 5000  # rows promoted or expired by one statement
_QUEUED = NotificationState.QUEUED.value
_SCHEDULED = NotificationState.SCHEDULED.value
_EXPIRED = NotificationState.EXPIRED.value
# The states as literals: the partial indexes serve a prepared statement's generic plan only
# when its text says what their predicates say (``leases.LEASED_ONLY`` says more).
_SCHEDULED_ONLY = N.c.state == sa.literal_column(f"'{_SCHEDULED}'")
_WAITING = N.c.state.in_([sa.literal_column(f"'{_QUEUED}'"), sa.literal_column(f"'{_SCHEDULED}'")])
_PAST = N.c.expires_at <= sa.bindparam("now")


class LifetimesRepo:
    """Promotes scheduled rows that fell due, and expires unclaimed rows past their deadline."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def promote(
        self, now: float, *, limit: int = SWEEP_PART
    ) -> tuple[dict[tuple[int, int], int], int]:
        """Queue at most ``limit`` of the scheduled rows due by ``now`` (wall s), the earliest
        first; those whose deadline passed as well end expired instead. Returns how many
        became queued per (tenant id, provider id), and how many expired."""
        pick = (
            sa.select(N.c.id)
            .where(_SCHEDULED_ONLY & (N.c.available_at <= sa.bindparam("now")))
            .order_by(N.c.available_at)
            .limit(limit)
        )
        statement = (
            N.update()
            .where(N.c.id.in_(picked_once(pick, is_sqlite=self._db.is_sqlite)))
            .values(
                state=sa.case((_PAST, _EXPIRED), else_=_QUEUED),
                finished_at=sa.case((_PAST, sa.bindparam("now")), else_=N.c.finished_at),
                last_error=sa.case((_PAST, EXPIRED_DETAIL), else_=N.c.last_error),
            )
            .returning(N.c.tenant_id, N.c.provider_id, N.c.state)
        )

        async def tx(conn: AsyncConnection) -> list[Any]:
            rows = list(await conn.execute(statement, {"now": now}))
            if not self._db.is_sqlite and any(row.state == _QUEUED for row in rows):
                await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, self._db.origin)))
            return rows

        rows = await self._db.write(tx)
        queued = Counter((r.tenant_id, r.provider_id) for r in rows if r.state == _QUEUED)
        return dict(queued), sum(1 for r in rows if r.state == _EXPIRED)

    async def next_deadline(self) -> float | None:
        """The soonest a sweep has work: the earliest scheduled row's send time or unclaimed
        row's deadline (unix s); None when there is neither. The first entry of each index."""
        statement = sa.select(
            sa.select(sa.func.min(N.c.available_at)).where(_SCHEDULED_ONLY).scalar_subquery(),
            sa.select(sa.func.min(N.c.expires_at))
            .where(_WAITING & N.c.expires_at.is_not(None))
            .scalar_subquery(),
        )

        async def tx(conn: AsyncConnection) -> float | None:
            due, deadline = (await conn.execute(statement)).one()
            found = [at for at in (due, deadline) if at is not None]
            return min(found) if found else None

        return await self._db.read(tx)

    async def timed_backlog(self, limit: int) -> list[tuple[int, int, bool, float, float | None]]:
        """What a plan of the backlog needs beyond the counts: each waiting row with a deadline
        or a send time, as (tenant id, provider id, scheduled, available at, expires at), at
        most ``limit``. Read along the two partial indexes: rows with neither cost nothing."""
        columns = (N.c.tenant_id, N.c.provider_id, N.c.state, N.c.available_at, N.c.expires_at)
        with_deadline = sa.select(*columns).where(_WAITING & N.c.expires_at.is_not(None))
        scheduled_only = sa.select(*columns).where(_SCHEDULED_ONLY & N.c.expires_at.is_(None))
        query = sa.union_all(with_deadline, scheduled_only).limit(limit)

        async def tx(conn: AsyncConnection) -> list[tuple[int, int, bool, float, float | None]]:
            return [
                (int(t), int(p), state == _SCHEDULED, float(at), until)
                for t, p, state, at, until in await conn.execute(query)
            ]

        return await self._db.read(tx)

    async def queued_in_order(
        self, keys: Sequence[tuple[int, int]], limit: int
    ) -> list[tuple[int, int, int, float | None]]:
        """The queued rows of ``keys`` (tenant id, provider id) in the order a claim takes
        them (highest priority first, then oldest), as (tenant id, provider id, priority,
        expires at), at most ``limit`` in all: where a plan needs each row's place, because
        some of them have deadlines. Along ``ix_notifications_claim``, a key at a time."""

        async def tx(conn: AsyncConnection) -> list[tuple[int, int, int, float | None]]:
            found: list[tuple[int, int, int, float | None]] = []
            for tenant_id, provider_id in keys:
                query = (
                    sa.select(N.c.priority, N.c.expires_at)
                    .where(
                        (N.c.state == _QUEUED)
                        & (N.c.tenant_id == tenant_id)
                        & (N.c.provider_id == provider_id)
                    )
                    .order_by(N.c.priority.desc(), N.c.id)
                    .limit(limit - len(found))
                )
                found += [(tenant_id, provider_id, pr, at) for pr, at in await conn.execute(query)]
                if len(found) >= limit:
                    break
            return found

        return await self._db.read(tx)

    async def expire(self, now: float, *, limit: int = SWEEP_PART) -> int:
        """End expired at most ``limit`` of the queued and scheduled rows whose deadline passed
        by ``now``, the earliest deadline first; returns how many."""
        pick = (
            sa.select(N.c.id)
            .where(_WAITING & N.c.expires_at.is_not(None) & _PAST)
            .order_by(N.c.expires_at)
            .limit(limit)
        )
        statement = (
            N.update()
            .where(N.c.id.in_(picked_once(pick, is_sqlite=self._db.is_sqlite)))
            .values(state=_EXPIRED, finished_at=sa.bindparam("now"), last_error=EXPIRED_DETAIL)
        )

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(statement, {"now": now})).rowcount)

        return await self._db.write(tx)
