"""Reads for a console over thousands of tenants, each costing what it returns.

``Engine.snapshot(view=...)`` and the console's log and queue views read here instead of
reading every tenant: the depth of named tenants (their rows of ``queue_counts`` and one index
entry each), an overview (totals per state, the deepest tenants, the oldest queued
notification: one pass over ``queue_counts`` inside the database, a few rows back, read at a
slower cadence by the engine), the newest deliveries of every tenant (one range of the
primary key), the newest notifications in one state across tenants (one range of an index),
and a cheap token that changes whenever the configuration does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.domain import NotificationState, Outcome
from engine.store.database import Database
from engine.store.notifications import view_of
from engine.store.records import DeliveryEntry, DepthRow, NotificationView
from engine.store.schema import (
    audit_log,
    delivery_log,
    notifications,
    providers,
    queue_counts,
    rate_limits,
    tenants,
)

__all__ = ["OverviewReads", "QueueOverview"]

N = notifications
C = queue_counts
_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_IDS_PER_QUERY = 100  # tenants probed per UNION ALL (SQLite allows 500 terms in a compound)


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """The whole queue in a few figures: notifications per state over every tenant, how many
    tenants have queued work, the deepest ``len(deepest)`` of them as (tenant id, queued),
    deepest first, and when the oldest queued notification of any tenant was enqueued. From
    ``totals`` alone: the first figure only (``tenants_queued`` None, nothing else)."""

    totals: dict[NotificationState, int]
    tenants_queued: int | None
    deepest: tuple[tuple[int, int], ...]
    oldest_enqueued_at: float | None


class OverviewReads:
    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    async def depth_of(self, tenant_ids: Sequence[int]) -> list[DepthRow]:
        """``NotificationsRepo.depth`` for ``tenant_ids`` only: their rows of the counts (a range of
        its primary key each) and, for those with queued work, one index entry each."""
        wanted = sorted(set(tenant_ids))
        if not wanted:
            return []

        async def tx(conn: AsyncConnection) -> list[DepthRow]:
            per: dict[tuple[int, str], int] = {}
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                query = (
                    sa.select(C.c.tenant_id, C.c.state, sa.func.sum(C.c.n))
                    .where(C.c.tenant_id.in_(wanted[start : start + _IDS_PER_QUERY]))
                    .group_by(C.c.tenant_id, C.c.state)
                )
                per.update({(r[0], r[1]): int(r[2]) for r in await conn.execute(query)})
            queued = [t for (t, state), n in per.items() if state == _QUEUED and n > 0]
            oldest = await _oldest(conn, sorted(queued))
            return [
                DepthRow(t, NotificationState(s), n, oldest.get(t) if s == _QUEUED else None)
                for (t, s), n in sorted(per.items())
                if n > 0
            ]

        return await self._db.read(tx)

    async def totals(self) -> QueueOverview:
        """Notifications per state over every tenant: one sum per state over ``queue_counts``
        inside the database, nothing read per tenant."""

        async def tx(conn: AsyncConnection) -> QueueOverview:
            return QueueOverview(await _per_state(conn), None, (), None)

        return await self._db.read(tx)

    async def overview(self, deepest: int) -> QueueOverview:
        """Totals per state, the ``deepest`` tenants with the most queued and the oldest queued
        notification. The database scans ``queue_counts`` (rows per tenant, provider, state
        and shard: it grows with the tenants, not the queue) and reads one index entry per
        tenant with queued work; a handful of rows come back."""

        async def tx(conn: AsyncConnection) -> QueueOverview:
            totals = await _per_state(conn)
            per_tenant = (
                sa.select(C.c.tenant_id, sa.func.sum(C.c.n).label("queued"))
                .where(C.c.state == _QUEUED)
                .group_by(C.c.tenant_id)
                .having(sa.func.sum(C.c.n) > 0)
                .subquery()
            )
            count = sa.select(sa.func.count()).select_from(per_tenant)
            tenants_queued = int((await conn.execute(count)).scalar_one())
            top = (
                sa.select(per_tenant.c.tenant_id, per_tenant.c.queued)
                .order_by(per_tenant.c.queued.desc(), per_tenant.c.tenant_id)
                .limit(deepest)
            )
            rows = tuple((int(r[0]), int(r[1])) for r in await conn.execute(top))
            first = (
                sa.select(N.c.id)
                .where((N.c.tenant_id == per_tenant.c.tenant_id) & (N.c.state == _QUEUED))
                .order_by(N.c.state, N.c.id)  # the (tenant_id, state, id) index's order
                .limit(1)
                .scalar_subquery()
            )
            firsts = sa.select(first.label("first")).select_from(per_tenant).subquery()
            oldest_id = sa.select(sa.func.min(firsts.c.first)).scalar_subquery()
            oldest = sa.select(N.c.enqueued_at).where(N.c.id == oldest_id)
            at = (await conn.execute(oldest)).scalar()
            return QueueOverview(
                totals,
                tenants_queued,
                rows,
                None if at is None else float(at),
            )

        return await self._db.read(tx)

    async def deliveries_after(self, after_id: int, *, limit: int) -> list[DeliveryEntry]:
        """The newest ``limit`` delivery-log rows of any tenant with an id above ``after_id``,
        newest first: one range of the primary key, however many tenants wrote them."""

        async def tx(conn: AsyncConnection) -> list[DeliveryEntry]:
            query = (
                sa.select(delivery_log)
                .where(delivery_log.c.id > after_id)
                .order_by(delivery_log.c.id.desc())
                .limit(limit)
            )
            return [
                DeliveryEntry(**{**r._mapping, "outcome": Outcome(r.outcome)})
                for r in await conn.execute(query)
            ]

        return await self._db.read(tx)

    async def newest_in_state(self, state: NotificationState, limit: int) -> list[NotificationView]:
        """The ``limit`` notifications of any tenant in ``state`` that changed last, newest
        first: finished ones by ``finished_at`` and leased ones by lease expiry (each one range
        of its partial index). Queued ones have no such index: they are read as the newest of
        the tenants with the most queued (the caller passes those to ``newest_of``)."""
        if state is NotificationState.QUEUED:
            raise ValueError("queued notifications are read per tenant (newest_of)")
        if state is NotificationState.SCHEDULED:  # the soonest to go, along their own index
            return await self._soonest_scheduled(limit)
        if state is NotificationState.LEASED:
            cond = N.c.state == _LEASED
            order = N.c.lease_expires_at.desc()
        else:
            cond = (N.c.state == state.value) & N.c.finished_at.is_not(None)
            order = N.c.finished_at.desc()

        async def tx(conn: AsyncConnection) -> list[NotificationView]:
            query = sa.select(N).where(cond).order_by(order).limit(limit)
            return [self._view(r) for r in await conn.execute(query)]

        return await self._db.read(tx)

    async def _soonest_scheduled(self, limit: int) -> list[NotificationView]:
        """The ``limit`` scheduled notifications of any tenant due soonest, along
        ``ix_notifications_scheduled_due`` (named on SQLite, whose planner would read every
        scheduled row through the claim index: ``lifetimes`` says more)."""
        table = (
            "notifications INDEXED BY ix_notifications_scheduled_due"
            if self._db.is_sqlite
            else "notifications"
        )
        query = sa.text(
            f"SELECT * FROM {table} WHERE state = 'scheduled' ORDER BY available_at LIMIT :n"
        ).columns(*N.c)

        async def tx(conn: AsyncConnection) -> list[NotificationView]:
            return [self._view(r) for r in await conn.execute(query, {"n": limit})]

        return await self._db.read(tx)

    async def config_token(self) -> tuple[int, int, int, int]:
        """Changes whenever the configuration does: the newest audit entry's id (every change
        through an engine is audited) and how many tenants, providers and pair limits there
        are. Four aggregates the database answers from indexes."""

        async def tx(conn: AsyncConnection) -> tuple[int, int, int, int]:
            query = sa.select(
                sa.select(sa.func.coalesce(sa.func.max(audit_log.c.id), 0)).scalar_subquery(),
                sa.select(sa.func.count()).select_from(tenants).scalar_subquery(),
                sa.select(sa.func.count()).select_from(providers).scalar_subquery(),
                sa.select(sa.func.count()).select_from(rate_limits).scalar_subquery(),
            )
            row = (await conn.execute(query)).one()
            return int(row[0]), int(row[1]), int(row[2]), int(row[3])

        return await self._db.read(tx)

    def _view(self, row: sa.Row[Any]) -> NotificationView:
        return view_of(self._box, row)


async def _per_state(conn: AsyncConnection) -> dict[NotificationState, int]:
    summed = sa.select(C.c.state, sa.func.sum(C.c.n)).group_by(C.c.state)
    totals = {NotificationState(r[0]): int(r[1]) for r in await conn.execute(summed)}
    return {s: totals.get(s, 0) for s in NotificationState}


async def _oldest(conn: AsyncConnection, tenant_ids: Sequence[int]) -> dict[int, float]:
    """When each tenant's oldest queued notification was enqueued: its first entry of
    ``ix_notifications_tenant_state`` (ids grow with enqueue time), one probe per tenant in
    one statement (compiled once: the ids are an expanding parameter)."""
    found: dict[int, float] = {}
    for start in range(0, len(tenant_ids), _IDS_PER_QUERY):
        ids = list(tenant_ids[start : start + _IDS_PER_QUERY])
        for row in await conn.execute(_OLDEST, {"ids": ids}):
            if row[1] is not None:
                found[int(row[0])] = float(row[1])
    return found


def _oldest_query() -> sa.Select[Any]:
    first = (
        sa.select(N.c.enqueued_at)
        .where((N.c.tenant_id == tenants.c.id) & (N.c.state == _QUEUED))
        .order_by(N.c.state, N.c.id)  # the (tenant_id, state, id) index's order
        .limit(1)
        .correlate(tenants)
        .scalar_subquery()
    )
    ids: sa.BindParameter[list[int]] = sa.bindparam("ids", expanding=True)
    return sa.select(tenants.c.id, first).where(tenants.c.id.in_(ids))


_OLDEST = _oldest_query()
