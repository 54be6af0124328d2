"""A tenant's notifications: reads whose cost does not grow with the store, and repairs.

Reads: a notification, pages of a tenant's (one bounded range of an index per state), the
delivery log, the depth of every tenant from the kept counts. Repairs: dead letters queued
again or discarded, queued ones cancelled. The queue's own life (enqueue, leases,
completions) and the dispatcher's reads are ``QueueRepo``'s (``queue.py``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox, mask
from engine.core.domain import NotificationState, Outcome
from engine.store.cancel import cancel_queued
from engine.store.counts import PAIRS_PER_QUERY, counts
from engine.store.database import Database
from engine.store.notify import CHANNEL
from engine.store.records import DeliveryEntry, DepthRow, NotificationView
from engine.store.schema import delivery_log, notifications, queue_counts
from engine.store.suppressions import SUPPRESSED_DETAIL, suppressed_of

__all__ = ["NotificationsRepo", "view_of"]

N = notifications
_QUEUED = NotificationState.QUEUED.value
_DEAD = NotificationState.DEAD.value
_SUPPRESSED = NotificationState.SUPPRESSED.value


class NotificationsRepo:
    """Each tenant's notifications as people see them (a row, a page, the delivery log, the
    depth per tenant) and the repairs an operator makes (dead letters queued again or
    discarded, queued ones cancelled). Every call takes the tenant's id."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    async def depth(self) -> list[DepthRow]:
        """Notifications per tenant and state, and the oldest enqueue time of each tenant's
        queued ones: read from the counts and one index entry per tenant with queued work."""

        async def tx(conn: AsyncConnection) -> list[DepthRow]:
            per: dict[tuple[int, str], int] = {}
            for t, _p, state, n in await counts(conn):
                per[t, state] = per.get((t, state), 0) + n
            queued = sorted(t for (t, state), n in per.items() if state == _QUEUED and n > 0)
            oldest: dict[int, float] = {}
            for start in range(0, len(queued), PAIRS_PER_QUERY):
                query = sa.union_all(
                    *(_oldest_probe(t) for t in queued[start : start + PAIRS_PER_QUERY])
                )
                rows = await conn.execute(query)
                oldest.update({r[0]: r[2] for r in rows if r[1] == _QUEUED})
            return [
                DepthRow(
                    t, NotificationState(state), n, oldest.get(t) if state == _QUEUED else None
                )
                for (t, state), n in sorted(per.items())
                if n > 0
            ]

        return await self._db.read(tx)

    async def recount(self) -> list[DepthRow]:
        """``depth`` the slow way, by scanning every row: what the tests compare the kept counts
        with. Never on a hot path."""

        async def tx(conn: AsyncConnection) -> list[DepthRow]:
            query = (
                sa.select(N.c.tenant_id, N.c.state, sa.func.count())
                .group_by(N.c.tenant_id, N.c.state)
                .order_by(N.c.tenant_id, N.c.state)
            )
            firsts = (
                sa.select(sa.func.min(N.c.id)).where(N.c.state == _QUEUED).group_by(N.c.tenant_id)
            )
            oldest = sa.select(N.c.tenant_id, N.c.enqueued_at).where(N.c.id.in_(firsts))
            first = {r[0]: r[1] for r in await conn.execute(oldest)}
            return [
                DepthRow(r[0], NotificationState(r[1]), int(r[2]), first.get(r[0]))
                if r[1] == _QUEUED
                else DepthRow(r[0], NotificationState(r[1]), int(r[2]), None)
                for r in await conn.execute(query)
            ]

        return await self._db.read(tx)

    async def get(self, tenant_id: int, notification_id: int) -> NotificationView | None:
        async def tx(conn: AsyncConnection) -> NotificationView | None:
            query = sa.select(N).where((N.c.tenant_id == tenant_id) & (N.c.id == notification_id))
            row = (await conn.execute(query)).first()
            return None if row is None else self._view(row)

        return await self._db.read(tx)

    async def list_by_tenant(
        self,
        tenant_id: int,
        *,
        state: NotificationState | None = None,
        limit: int = 100,
        after_id: int = 0,
    ) -> list[NotificationView]:
        """A tenant's notifications after ``after_id``, in id order: those in ``state``, or of
        any state. Each state is one range of ``ix_notifications_tenant_state`` (any state is
        the first ``limit`` of the four ranges merged), so a page costs the same however many
        rows the tenant has."""
        states = [state] if state is not None else list(NotificationState)

        async def tx(conn: AsyncConnection) -> list[NotificationView]:
            rows: list[sa.Row[Any]] = []
            for one in states:
                query = sa.select(N).where(_from_state(tenant_id, one.value, after_id))
                found = await conn.execute(query.order_by(N.c.state, N.c.id).limit(limit))
                rows += [r for r in found if r.state == one.value]
            rows.sort(key=lambda r: r.id)
            return [self._view(r) for r in rows[:limit]]

        return await self._db.read(tx)

    async def page(
        self,
        tenant_id: int,
        *,
        state: NotificationState | None = None,
        provider_id: int | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[NotificationView]:
        """A tenant's notifications below ``before_id``, newest first: those in ``state`` (or
        of any state) and of ``provider_id`` (or any). Each state is one backward range of
        ``ix_notifications_tenant_state`` read from ``before_id`` down, so a page costs the same
        however many rows the tenant has (a provider filter skips the other providers' rows
        of the range)."""
        states = [state] if state is not None else list(NotificationState)
        below = before_id if before_id is not None else 2**62

        async def tx(conn: AsyncConnection) -> list[NotificationView]:
            rows: list[sa.Row[Any]] = []
            for one in states:
                where = _below_state(tenant_id, one.value, below) & (N.c.state == one.value)
                if provider_id is not None:
                    where &= N.c.provider_id == provider_id
                query = sa.select(N).where(where).order_by(N.c.state.desc(), N.c.id.desc())
                rows += await conn.execute(query.limit(limit))
            rows.sort(key=lambda r: r.id, reverse=True)
            return [self._view(r) for r in rows[:limit]]

        return await self._db.read(tx)

    async def queued_of(self, tenant_id: int) -> int:
        """How many notifications the tenant holds queued, from the kept counts."""
        query = sa.select(sa.func.coalesce(sa.func.sum(queue_counts.c.n), 0)).where(
            (queue_counts.c.tenant_id == tenant_id) & (queue_counts.c.state == _QUEUED)
        )

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(query)).scalar() or 0)

        return await self._db.read(tx)

    def _view(self, row: sa.Row[Any]) -> NotificationView:
        return view_of(self._box, row)

    async def deliveries(
        self, tenant_id: int, *, notification_id: int | None = None, limit: int = 100
    ) -> list[DeliveryEntry]:
        async def tx(conn: AsyncConnection) -> list[DeliveryEntry]:
            cond = delivery_log.c.tenant_id == tenant_id
            if notification_id is not None:
                cond &= delivery_log.c.notification_id == notification_id
            query = (
                sa.select(delivery_log).where(cond).order_by(delivery_log.c.id.desc()).limit(limit)
            )
            return [
                DeliveryEntry(**{**r._mapping, "outcome": Outcome(r.outcome)})
                for r in await conn.execute(query)
            ]

        return await self._db.read(tx)

    async def dead_retry(self, tenant_id: int, ids: Sequence[int] | None, *, now: float) -> int:
        """``dead_retry_counts``'s first figure: how many were queued again."""
        return (await self.dead_retry_counts(tenant_id, ids, now=now))[0]

    async def dead_retry_counts(
        self, tenant_id: int, ids: Sequence[int] | None, *, now: float
    ) -> tuple[int, int]:
        """Queue dead notifications again with a fresh attempt budget; ``None`` means all of the
        tenant's dead ones. One whose recipient the tenant has since suppressed for its
        provider (a recipient that replied STOP, whose answer made it dead) becomes
        ``suppressed`` instead, never sent. Returns how many were queued again and how many
        were suppressed."""

        async def tx(conn: AsyncConnection) -> tuple[int, int]:
            dead = _dead(tenant_id, ids)
            gone = await suppressed_of(conn, self._box, tenant_id, dead)
            if gone:
                await conn.execute(
                    N.update()
                    .where(dead & N.c.id.in_(gone))
                    .values(state=_SUPPRESSED, finished_at=now, last_error=SUPPRESSED_DETAIL)
                )
            result = await conn.execute(
                N.update()
                .where(dead)
                .values(state=_QUEUED, failures=0, available_at=now, finished_at=None)
            )
            if result.rowcount and not self._db.is_sqlite:
                await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, self._db.origin)))
            return int(result.rowcount), len(gone)

        return await self._db.write(tx)

    async def dead_discard(self, tenant_id: int, ids: Sequence[int] | None) -> int:
        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(N.delete().where(_dead(tenant_id, ids)))).rowcount)

        return await self._db.write(tx)

    async def cancel(self, tenant_id: int, notification_id: int, *, now: float) -> NotificationView:
        """Cancel one queued notification of the tenant: ``engine.store.cancel`` says how,
        and what it raises."""
        found = functools.partial(
            cancel_queued, tenant_id=tenant_id, notification_id=notification_id, now=now
        )
        return self._view(await self._db.write(found))


def _dead(tenant_id: int, ids: Sequence[int] | None) -> sa.ColumnElement[bool]:
    cond = (N.c.tenant_id == tenant_id) & (N.c.state == _DEAD)
    return cond if ids is None else cond & N.c.id.in_(list(ids))


def _from_state(tenant_id: int, state: str, after_id: int) -> sa.ColumnElement[bool]:
    """The tenant's rows from (``state``, ``after_id``) on, to be read in (state, id) order:
    a range of ``ix_notifications_tenant_state`` that runs on into the states after ``state``,
    so callers keep the rows of ``state`` and stop. Written as a row comparison because that
    order is one only this index yields: with ``state = ? ORDER BY id`` Postgres may walk the
    primary key and filter instead (it did, through a million rows of another tenant)."""
    return (N.c.tenant_id == tenant_id) & (
        sa.tuple_(N.c.state, N.c.id) > sa.tuple_(sa.literal(state), sa.literal(after_id))
    )


def _below_state(tenant_id: int, state: str, before_id: int) -> sa.ColumnElement[bool]:
    """``_from_state`` read backwards: the tenant's rows below (``state``, ``before_id``)."""
    return (N.c.tenant_id == tenant_id) & (
        sa.tuple_(N.c.state, N.c.id) < sa.tuple_(sa.literal(state), sa.literal(before_id))
    )


def _oldest_probe(tenant_id: int) -> sa.Select[Any]:
    """(tenant, state, enqueued_at) of the tenant's lowest queued id (its oldest queued
    notification; the state is another when it has none), one index entry."""
    first = (
        sa.select(N.c.tenant_id, N.c.state, N.c.enqueued_at)
        .where(_from_state(tenant_id, _QUEUED, 0))
        .order_by(N.c.state, N.c.id)
        .limit(1)
        .subquery()
    )
    return sa.select(first)


def view_of(box: SecretBox, row: sa.Row[Any]) -> NotificationView:
    """A notifications row as people see it: the recipient masked."""
    return NotificationView(
        id=row.id,
        tenant_id=row.tenant_id,
        provider_id=row.provider_id,
        recipient_masked=mask(box.decrypt(row.recipient)),
        payload=json.loads(row.payload),
        idempotency_key=row.idempotency_key,
        priority=row.priority,
        state=NotificationState(row.state),
        attempt=row.attempt,
        failures=row.failures,
        max_attempts=row.max_attempts,
        available_at=row.available_at,
        enqueued_at=row.enqueued_at,
        finished_at=row.finished_at,
        last_error=row.last_error,
        expires_at=row.expires_at,
    )
