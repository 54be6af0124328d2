"""Reads of the queue whose cost does not grow with it: counts, due pairs, listings.

The counts come from ``queue_counts`` (kept by the triggers of migration 0003); everything else
reads one bounded range of an index per tenant or pair, however many rows the store keeps.
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
from engine.store.database import Database, in_parts
from engine.store.records import (
    DeliveryEntry,
    DepthRow,
    DuePair,
    Enqueue,
    NotificationView,
    Share,
)
from engine.store.schema import delivery_log, notifications, queue_counts

__all__ = ["DUE_CAP", "QueueReads", "view_of"]

N = notifications
_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
DUE_CAP = 1024  # due rows counted per pair and refresh; the dispatcher needs at least a batch
_PAIRS_PER_QUERY = 100  # pairs probed per UNION ALL (SQLite allows 500 terms in a compound)
_PROBE_SIZES = (1, 4, 16, 50, _PAIRS_PER_QUERY)  # the UNION ALLs built (and compiled) once each


class QueueReads:
    """The read side of the queue (``QueueRepo`` adds the writes)."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box
        # Postgres: the tenants found to keep a suppression list (pg_hot.enqueue).
        self._listed: set[int] = set()

    async def due_pairs(
        self,
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        """Every (tenant, provider) pair with queued work, or only those of ``pairs`` that
        have some: how much is due now (counted up to ``DUE_CAP``: the dispatcher only needs
        to know there is at least a batch), when the next falls due, and its queued rows in
        the kept counts. Reads the counts (all pairs) and, per pair, at most ``DUE_CAP`` index
        entries, however deep the queue. The dispatcher asks for ``pairs`` only (those whose
        count ran out); a look at every pair is for tools and tests."""

        async def tx(conn: AsyncConnection) -> list[DuePair]:
            probed = list(pairs) if pairs is not None else None
            if probed is None:
                probed = [(t, p) for t, p, state, _n in await _counts(conn) if state == _QUEUED]
            probed = [(t, p) for t, p in probed if tenant_ids is None or t in tenant_ids]
            found: list[DuePair] = []
            for start in range(0, len(probed), _PAIRS_PER_QUERY):
                chunk = probed[start : start + _PAIRS_PER_QUERY]
                # Padded with its last pair to one of a few sizes: each size is compiled once.
                size = next(n for n in _PROBE_SIZES if n >= len(chunk))
                chunk += [chunk[-1]] * (size - len(chunk))
                params: dict[str, Any] = {"now": now}
                for i, (t, p) in enumerate(chunk):
                    params[f"t{i}"], params[f"p{i}"] = t, p
                rows = await conn.execute(_due_probes(size), params)
                found.extend(
                    DuePair(r[0], r[1], int(r[2]), float(r[3]), int(r[4] or 0))
                    for r in rows
                    if r[3] is not None  # the count ran ahead of a concurrent claim
                )
            return list({(d.tenant_id, d.provider_id): d for d in found}.values())

        return await self._db.read(tx) if tenant_ids is None or tenant_ids else []

    async def queued_counts(self, share: Share | None = None) -> dict[tuple[int, int], int]:
        """Queued rows per (tenant, provider) with any, from the kept counts: one read of
        ``queue_counts`` (its rows in the queued state), however deep the queue. With
        ``share``, only the pairs of that worker's part of the tenants and the deep ones: the
        rest are never sent to it, nor read into rows."""
        query = _QUEUED_COUNTS if share is None else _queued_counts_of(share)

        async def tx(conn: AsyncConnection) -> dict[tuple[int, int], int]:
            return dict(await in_parts(conn, query, _count_entry, raw=True))  # the loop turns

        return await self._db.read(tx)

    async def providers_with_work(self) -> dict[int, bool]:
        """Each provider with queued or leased notifications, and whether any are leased (in
        flight): read from the counts, whatever the queue holds."""

        async def tx(conn: AsyncConnection) -> dict[int, bool]:
            found: dict[int, bool] = {}
            for _t, p, state, n in await _counts(conn):
                if n > 0 and state in (_QUEUED, _LEASED):
                    found[p] = found.get(p, False) or state == _LEASED
            return found

        return await self._db.read(tx)

    async def backlog(self) -> dict[tuple[int, int], int]:
        """Queued and leased notifications per (tenant, provider), from the counts."""

        async def tx(conn: AsyncConnection) -> dict[tuple[int, int], int]:
            found: dict[tuple[int, int], int] = {}
            for t, p, state, n in await _counts(conn):
                if n > 0 and state in (_QUEUED, _LEASED):
                    found[t, p] = found.get((t, p), 0) + n
            return found

        return await self._db.read(tx)

    async def enqueues_since(self, since: float, limit: int) -> list[Enqueue]:
        """The notifications enqueued at or after ``since`` (unix s) that the store still
        keeps, oldest first, at most ``limit``. Ids grow with enqueue time, so the first one
        is found by a binary search over the primary key (a few dozen point reads) and the
        rest are one range of it: the cost follows the window, not the store."""
        probe = sa.select(N.c.id, N.c.enqueued_at).order_by(N.c.id).limit(1)

        async def tx(conn: AsyncConnection) -> list[Enqueue]:
            bounds = (await conn.execute(sa.select(sa.func.min(N.c.id), sa.func.max(N.c.id)))).one()
            if bounds[0] is None:
                return []
            lo, hi = int(bounds[0]), int(bounds[1]) + 1
            while lo < hi:  # the first id whose row (or the next kept one) is recent enough
                mid = (lo + hi) // 2
                row = (await conn.execute(probe.where(N.c.id >= mid))).first()
                if row is None or row.enqueued_at >= since:
                    hi = mid
                else:
                    lo = int(row.id) + 1
            query = (
                sa.select(N.c.enqueued_at, N.c.tenant_id, N.c.provider_id, N.c.priority)
                .where((N.c.id >= lo) & (N.c.enqueued_at >= since))
                .order_by(N.c.id)
                .limit(limit)
            )
            rows = [Enqueue(r[0], r[1], r[2], r[3]) for r in await conn.execute(query)]
            rows.sort(key=lambda e: e.enqueued_at)
            return rows

        return await self._db.read(tx)

    async def depth(self) -> list[DepthRow]:
        """Notifications per tenant and state, and the oldest enqueue time of each tenant's
        queued ones: read from the counts and one index entry per tenant with queued work."""

        async def tx(conn: AsyncConnection) -> list[DepthRow]:
            per: dict[tuple[int, str], int] = {}
            for t, _p, state, n in await _counts(conn):
                per[t, state] = per.get((t, state), 0) + n
            queued = sorted(t for (t, state), n in per.items() if state == _QUEUED and n > 0)
            oldest: dict[int, float] = {}
            for start in range(0, len(queued), _PAIRS_PER_QUERY):
                query = sa.union_all(
                    *(_oldest_probe(t) for t in queued[start : start + _PAIRS_PER_QUERY])
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


def _count_entry(row: Sequence[Any]) -> tuple[tuple[int, int], int]:
    tenant_id, provider_id, n = row
    return (tenant_id, provider_id), int(n)


_QUEUED_COUNTS = (
    sa.select(queue_counts.c.tenant_id, queue_counts.c.provider_id, sa.func.sum(queue_counts.c.n))
    .where(queue_counts.c.state == _QUEUED)
    .group_by(queue_counts.c.tenant_id, queue_counts.c.provider_id)
    .having(sa.func.sum(queue_counts.c.n) > 0)
)


def _queued_counts_of(share: Share) -> sa.Select[Any]:
    """``_QUEUED_COUNTS`` for one worker's ``share``: ``share_index`` in SQL (the same integer
    arithmetic on Postgres and SQLite: a product under 2**63, a remainder, a shift)."""
    hashed = (queue_counts.c.tenant_id * sa.literal_column("2654435761")) % sa.literal_column(
        "4294967296"
    )
    index = (hashed * share.workers).op(">>")(sa.literal_column("32"))
    total = sa.func.sum(queue_counts.c.n)
    return _QUEUED_COUNTS.having(sa.or_(index == share.index, total >= share.deep))


async def _counts(conn: AsyncConnection) -> list[tuple[int, int, str, int]]:
    """(tenant, provider, state, rows) with rows != 0, summed over the shards."""
    C = queue_counts
    query = (
        sa.select(C.c.tenant_id, C.c.provider_id, C.c.state, sa.func.sum(C.c.n))
        .group_by(C.c.tenant_id, C.c.provider_id, C.c.state)
        .having(sa.func.sum(C.c.n) != 0)
    )
    return [(r[0], r[1], r[2], int(r[3])) for r in await conn.execute(query)]


@functools.lru_cache(maxsize=len(_PROBE_SIZES))
def _due_probes(n: int) -> sa.CompoundSelect[Any]:
    """The look at ``n`` pairs (bound as ``t0, p0, ...``, and ``now``), built once per ``n``:
    SQLAlchemy then finds its compiled form in its cache instead of building it per look."""
    return sa.union_all(*(_due_probe(i) for i in range(n)))


def _due_probe(i: int) -> sa.Select[Any]:
    """One pair's capped count of due rows and its earliest ``available_at``, each a range of
    ``ix_notifications_queued_due``, and its queued rows in the kept counts."""
    tenant = sa.bindparam(f"t{i}", type_=sa.Integer)
    provider = sa.bindparam(f"p{i}", type_=sa.Integer)
    now = sa.bindparam("now", type_=sa.Double)
    key = (N.c.state == _QUEUED) & (N.c.tenant_id == tenant) & (N.c.provider_id == provider)
    # Ordered as the index is, so that Postgres walks it rather than the whole table.
    capped = (
        sa.select(N.c.id)
        .where(key & (N.c.available_at <= now))
        .order_by(N.c.available_at)
        .limit(DUE_CAP)
        .subquery()
    )
    due = sa.select(sa.func.count()).select_from(capped).scalar_subquery()
    first = sa.select(sa.func.min(N.c.available_at)).where(key).scalar_subquery()
    C = queue_counts
    counted = (
        sa.select(sa.func.sum(C.c.n))
        .where((C.c.tenant_id == tenant) & (C.c.provider_id == provider) & (C.c.state == _QUEUED))
        .scalar_subquery()
    )
    return sa.select(tenant, provider, due, first, counted)


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
