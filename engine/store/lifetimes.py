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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import EXPIRED_DETAIL, NotificationState
from engine.store.database import Database
from engine.store.notify import CHANNEL
from engine.store.schema import notifications

__all__ = ["SWEEP_PART", "LifetimesRepo", "Promoted"]

N = notifications
SWEEP_PART = 5000  # rows promoted or expired by one statement
_QUEUED = NotificationState.QUEUED.value
_SCHEDULED = NotificationState.SCHEDULED.value
_EXPIRED = NotificationState.EXPIRED.value
# The states as literals: the partial indexes serve a prepared statement's generic plan only
# when its text says what their predicates say (``leases.LEASED_ONLY`` says more). On SQLite
# each statement names its index (``INDEXED BY``): after ANALYZE its planner took the claim
# index (state first) for ``state = 'scheduled'`` and read every scheduled row, then sorted
# them, where the partial index gives the first at once (measured: 30-60 ms a sweep with
# 300,000 scheduled rows, and the drain around them 10-20% slower).
_PAST_SQL = "expires_at <= :now"
_WAITING_SQL = f"state IN ('{_QUEUED}', '{_SCHEDULED}') AND expires_at IS NOT NULL"
_WHY = EXPIRED_DETAIL.replace("'", "''")


def _table(index: str, *, is_sqlite: bool) -> str:
    """``notifications``, read along ``index`` on SQLite."""
    return f"notifications INDEXED BY {index}" if is_sqlite else "notifications"


def _picked(pick: str, *, is_sqlite: bool) -> tuple[str, str]:
    """A statement's prefix and the ``IN (...)`` operand that touch exactly the rows ``pick``
    selects (``database.picked_once`` says why Postgres locks them in a materialized CTE)."""
    if is_sqlite:
        return "", pick
    return f"WITH picked AS MATERIALIZED ({pick} FOR UPDATE SKIP LOCKED) ", "SELECT id FROM picked"


@dataclass
class Promoted:
    """What one ``promote`` did: rows queued and due now per (tenant id, provider id), keys
    whose queued rows fall due later (their send time, ahead of it: the earliest per key) and
    how many of those rows, and rows that expired instead."""

    due: dict[tuple[int, int], int] = field(default_factory=dict)
    later: dict[tuple[int, int], float] = field(default_factory=dict)
    ahead: int = 0
    expired: int = 0

    @property
    def total(self) -> int:
        return sum(self.due.values()) + self.ahead + self.expired


class LifetimesRepo:
    """Promotes scheduled rows that fell due, and expires unclaimed rows past their deadline."""

    def __init__(self, db: Database) -> None:
        self._db = db
        lite = db.is_sqlite
        scheduled = _table("ix_notifications_scheduled_due", is_sqlite=lite)
        waiting = _table("ix_notifications_waiting_expiry", is_sqlite=lite)
        head, ids = _picked(
            f"SELECT id FROM {scheduled} WHERE state = '{_SCHEDULED}' AND available_at <= :upto"
            " ORDER BY available_at LIMIT :n",
            is_sqlite=lite,
        )
        self._promote = sa.text(
            f"{head}UPDATE notifications"
            f" SET state = CASE WHEN {_PAST_SQL} THEN '{_EXPIRED}' ELSE '{_QUEUED}' END,"
            f" finished_at = CASE WHEN {_PAST_SQL} THEN :now ELSE finished_at END,"
            f" last_error = CASE WHEN {_PAST_SQL} THEN '{_WHY}' ELSE last_error END"
            f" WHERE id IN ({ids}) RETURNING tenant_id, provider_id, state, available_at"
        )
        head, ids = _picked(
            f"SELECT id FROM {waiting} WHERE {_WAITING_SQL} AND {_PAST_SQL}"
            " ORDER BY expires_at LIMIT :n",
            is_sqlite=lite,
        )
        self._expire = sa.text(
            f"{head}UPDATE notifications SET state = '{_EXPIRED}', finished_at = :now,"
            f" last_error = '{_WHY}' WHERE id IN ({ids})"
        )
        self._next = sa.text(
            f"SELECT (SELECT min(available_at) FROM {scheduled} WHERE state = '{_SCHEDULED}'),"
            f" (SELECT min(expires_at) FROM {waiting} WHERE {_WAITING_SQL})"
        )
        self._scheduled_by = sa.text(
            f"SELECT count(*) FROM (SELECT 1 FROM {scheduled} WHERE state = '{_SCHEDULED}'"
            " AND available_at <= :upto LIMIT :cap) AS due"
        )
        columns = "tenant_id, provider_id, state, available_at, expires_at"
        self._timed = sa.text(
            f"SELECT {columns} FROM {waiting} WHERE {_WAITING_SQL} UNION ALL"
            f" SELECT {columns} FROM {scheduled} WHERE state = '{_SCHEDULED}'"
            " AND expires_at IS NULL LIMIT :n"
        )

    async def promote(
        self, now: float, *, ahead_s: float = 0.0, limit: int = SWEEP_PART
    ) -> Promoted:
        """Queue at most ``limit`` of the scheduled rows due by ``now + ahead_s`` (wall s), the
        earliest first, each still not claimable before its send time (``available_at``);
        those whose deadline passed by ``now`` end expired instead."""

        async def tx(conn: AsyncConnection) -> list[Any]:
            params = {"now": now, "upto": now + ahead_s, "n": limit}
            rows = list(await conn.execute(self._promote, params))
            if not self._db.is_sqlite and any(row.state == _QUEUED for row in rows):
                await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, self._db.origin)))
            return rows

        promoted = Promoted()
        for row in await self._db.write(tx):
            key = (row.tenant_id, row.provider_id)
            if row.state == _EXPIRED:
                promoted.expired += 1
            elif row.available_at <= now:
                promoted.due[key] = promoted.due.get(key, 0) + 1
            else:
                soonest = promoted.later.get(key)
                promoted.later[key] = (
                    row.available_at if soonest is None else min(soonest, row.available_at)
                )
                promoted.ahead += 1
        return promoted

    async def next_times(self) -> tuple[float | None, float | None]:
        """When a sweep next has work: the earliest scheduled row's send time and the earliest
        unclaimed row's deadline (unix s; None: there is none). The first entry of each of the
        two partial indexes."""

        async def tx(conn: AsyncConnection) -> tuple[float | None, float | None]:
            due, deadline = (await conn.execute(self._next)).one()
            return due, deadline

        return await self._db.read(tx)

    async def scheduled_by(self, upto: float, *, cap: int) -> int:
        """How many scheduled rows fall due by ``upto`` (wall s), counted up to ``cap``: at most
        ``cap`` entries of the partial index of scheduled rows."""

        async def tx(conn: AsyncConnection) -> int:
            return int(
                (await conn.execute(self._scheduled_by, {"upto": upto, "cap": cap})).scalar_one()
            )

        return await self._db.read(tx)

    async def timed_backlog(self, limit: int) -> list[tuple[int, int, bool, float, float | None]]:
        """What a plan of the backlog needs beyond the counts: each waiting row with a deadline
        or a send time, as (tenant id, provider id, scheduled, available at, expires at), at
        most ``limit``. Read along the two partial indexes: rows with neither cost nothing."""

        async def tx(conn: AsyncConnection) -> list[tuple[int, int, bool, float, float | None]]:
            return [
                (int(t), int(p), state == _SCHEDULED, float(at), until)
                for t, p, state, at, until in await conn.execute(self._timed, {"n": limit})
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

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(self._expire, {"now": now, "n": limit})).rowcount)

        return await self._db.write(tx)
