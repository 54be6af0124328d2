"""The outbox of status events: leased, finished, retried and replayed as notifications are.

The events are written by triggers (migration 0012) in the transaction of the change that
causes them; a finish holds only while the lease it was given does (same owner, same try, still
leased). An endpoint that is disabled parks its pending events (``held``), out of the claim's
index, until it is enabled again (``set_enabled``). The endpoints themselves:
``engine/store/endpoints.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox, mask
from engine.core.errors import SecretUnreadable
from engine.core.status_events import EventState
from engine.store.database import Database
from engine.store.endpoints import set_enabled
from engine.store.schema import event_endpoints, notifications, providers, status_events, tenants

__all__ = [
    "DueEvent",
    "StatusEventsRepo",
    "TryEnd",
]

E, S = event_endpoints, status_events


@dataclass(frozen=True, slots=True)
class DueEvent:
    """An event leased to a courier, with what its body says."""

    id: int
    endpoint_id: int
    tenant: str
    type: str
    tries: int  # this try's number, from 1; the finish's fence
    occurred_at: float
    sequence: int
    notification_id: int | None
    provider: str | None
    state: str | None  # the notification's, from the type
    attempt: int | None
    max_attempts: int | None
    retrying: bool | None
    outcome: str | None
    error: str | None
    idempotency_key: str | None
    recipient: str | None  # masked, when the notification is still kept


class StatusEventsRepo:
    """The outbox's reads and writes; each of a tenant's takes its id."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    def _masked(self, sealed: str | None) -> str | None:
        if sealed is None:
            return None
        try:
            return mask(self._box.decrypt(sealed))
        except SecretUnreadable:
            return None

    async def next_due(self) -> float | None:
        """When the soonest pending event is due (the first entry of the partial index of
        pending events), or None when none waits: an idle courier reads this, not a claim."""

        async def tx(conn: AsyncConnection) -> float | None:
            query = sa.select(sa.func.min(S.c.available_at)).where(S.c.state == EventState.PENDING)
            found = (await conn.execute(query)).scalar()
            return None if found is None else float(found)

        return await self._db.read(tx)

    async def claim(self, owner: str, *, now: float, lease_s: float, limit: int) -> list[DueEvent]:
        """Lease up to ``limit`` due pending events, soonest first (``SKIP LOCKED`` on Postgres,
        so that couriers of several workers share them)."""
        picked = (
            sa.select(S.c.id)
            .where((S.c.state == EventState.PENDING) & (S.c.available_at <= now))
            .order_by(S.c.available_at)
            .limit(limit)
        )
        if not self._db.is_sqlite:
            picked = picked.with_for_update(skip_locked=True)
        lease = (
            S.update()
            .where(S.c.id.in_(picked.scalar_subquery()))
            .values(
                state=EventState.LEASED,
                lease_owner=owner,
                lease_expires_at=now + lease_s,
                tries=S.c.tries + 1,
            )
            .returning(S.c.id)
        )

        async def tx(conn: AsyncConnection) -> list[DueEvent]:
            ids = [r.id for r in await conn.execute(lease)]
            if not ids:
                return []
            n = notifications
            query = (
                sa.select(
                    S, tenants.c.name.label("tenant"), providers.c.name.label("provider_name")
                )
                .add_columns(n.c.recipient)
                .join(tenants, tenants.c.id == S.c.tenant_id)
                .outerjoin(providers, providers.c.id == S.c.provider_id)
                .outerjoin(n, n.c.id == S.c.notification_id)
                .where(S.c.id.in_(ids))
                .order_by(S.c.id)
            )
            return [_due(r, self._masked(r.recipient)) for r in await conn.execute(query)]

        return await self._db.write(tx)

    async def finish(
        self, owner: str, tries: Sequence[TryEnd], *, now: float, disable_after_s: float
    ) -> list[tuple[int, str]]:
        """Write the ends of ``tries`` in one transaction, each only while its lease holds
        (same owner, same try, still leased): delivered, due again at ``retry_at``, or (neither)
        given up. Each endpoint's health follows: a delivery clears its failing time; a failure
        starts it, and disables the endpoint once it has failed every try for
        ``disable_after_s``, or at once with ``disable`` (a 410). Returns the endpoints
        disabled, with why."""
        ordered = sorted(tries, key=lambda e: e.event.id)
        rows = [_end_row(end, owner, now) for end in ordered]

        async def tx(conn: AsyncConnection) -> list[tuple[int, str]]:
            if not self._db.is_sqlite:  # one statement over arrays, answering what it wrote
                found = await conn.exec_driver_sql(_PG_FINISH, _pg_arrays(rows, owner))
                written_ids = {row[0] for row in found}
                done = [end for end in ordered if end.event.id in written_ids]
            # SQLite: one executemany (one trip to its thread); only when some lease did not
            # hold (another courier took the event over) is each row looked at again.
            elif (await conn.execute(_FINISH, rows)).rowcount == len(rows):
                done = ordered
            else:
                done = [end for end in ordered if await _holds_end(conn, end, now)]
            healthy = sorted({e.event.endpoint_id for e in done if e.delivered})
            if healthy:
                await conn.execute(
                    E.update()
                    .where(E.c.id.in_(healthy) & E.c.failing_since.is_not(None))
                    .values(failing_since=None)
                )
            failing: dict[int, str] = {}
            for end in done:
                if not end.delivered and not failing.get(end.event.endpoint_id):
                    failing[end.event.endpoint_id] = end.disable
            disabled = []
            for endpoint_id, disable in sorted(failing.items()):
                reason = await _failing(conn, endpoint_id, disable, now, disable_after_s)
                if reason and await set_enabled(
                    conn, None, endpoint_id, False, reason, now, "courier"
                ):
                    disabled.append((endpoint_id, reason))
            return disabled

        return await self._db.write(tx) if tries else []

    async def renew(self, owner: str, *, now: float, lease_s: float) -> int:
        """Extend every lease ``owner`` holds (posts under way) to ``now + lease_s``."""

        async def tx(conn: AsyncConnection) -> int:
            result = await conn.execute(
                S.update()
                .where((S.c.state == EventState.LEASED) & (S.c.lease_owner == owner))
                .values(lease_expires_at=now + lease_s)
            )
            return int(result.rowcount)

        return await self._db.write(tx)

    async def busy(self, now: float) -> bool:
        """Whether an event is due now or being posted: what ``run_until_empty`` waits for
        (events waiting for a later retry are not)."""

        async def tx(conn: AsyncConnection) -> bool:
            due = sa.select(S.c.id).where(
                ((S.c.state == EventState.PENDING) & (S.c.available_at <= now))
                | (S.c.state == EventState.LEASED)
            )
            return (await conn.execute(due.limit(1))).first() is not None

        return await self._db.read(tx)

    async def reap(self, now: float) -> int:
        """Leases past their expiry (a courier that died) back to pending; returns how many."""

        expired = (S.c.state == EventState.LEASED) & (S.c.lease_expires_at < now)

        async def any_expired(conn: AsyncConnection) -> bool:
            return (
                await conn.execute(sa.select(S.c.id).where(expired).limit(1))
            ).first() is not None

        if not await self._db.read(any_expired):  # a read: no write lock taken for nothing
            return 0

        async def tx(conn: AsyncConnection) -> int:
            result = await conn.execute(
                S.update()
                .where(expired)
                .values(state=EventState.PENDING, lease_owner=None, lease_expires_at=None)
            )
            return int(result.rowcount)

        return await self._db.write(tx)


def _due(r: Any, recipient: str | None) -> DueEvent:
    kind = str(r.type)
    return DueEvent(
        id=r.id,
        endpoint_id=r.endpoint_id,
        tenant=r.tenant,
        type=kind,
        tries=r.tries,
        occurred_at=r.occurred_at,
        sequence=r.sequence,
        notification_id=r.notification_id,
        provider=r.provider_name,
        state=r.notification_state,
        attempt=r.attempt,
        max_attempts=r.max_attempts,
        retrying=None if r.retrying is None else bool(r.retrying),
        outcome=r.outcome,
        error=r.error,
        idempotency_key=r.idempotency_key,
        recipient=recipient,
    )


@dataclass(frozen=True, slots=True)
class TryEnd:
    """How one try of ``event`` ended: delivered, due again at ``retry_at``, or given up."""

    event: DueEvent
    delivered: bool
    retry_at: float | None
    status: int | None
    error: str
    disable: str = ""  # disable the endpoint at once, for this reason (a 410)


_FINISH = (
    S.update()
    .where(
        (S.c.id == sa.bindparam("f_id"))
        & (S.c.lease_owner == sa.bindparam("f_owner"))
        & (S.c.tries == sa.bindparam("f_tries"))
        & (S.c.state == EventState.LEASED)
    )
    .values(
        state=sa.bindparam("f_state"),
        lease_owner=None,
        lease_expires_at=None,
        last_status=sa.bindparam("f_status"),
        last_error=sa.bindparam("f_error"),
        available_at=sa.func.coalesce(sa.bindparam("f_retry_at"), S.c.available_at),
        finished_at=sa.bindparam("f_finished_at"),
    )
)


_PG_FINISH = """
UPDATE status_events AS s
SET state = u.state, lease_owner = NULL, lease_expires_at = NULL, last_status = u.status,
    last_error = u.error, available_at = COALESCE(u.retry_at, s.available_at),
    finished_at = u.finished_at
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::integer[], $5::text[], $6::float8[],
            $7::float8[]) AS u(id, tries, state, status, error, retry_at, finished_at)
WHERE s.id = u.id AND s.tries = u.tries AND s.lease_owner = $8 AND s.state = 'leased'
RETURNING s.id
"""


def _pg_arrays(rows: Sequence[dict[str, Any]], owner: str) -> tuple[Any, ...]:
    columns = ("f_id", "f_tries", "f_state", "f_status", "f_error", "f_retry_at", "f_finished_at")
    return (*([row[c] for row in rows] for c in columns), owner)


async def _holds_end(conn: AsyncConnection, end: TryEnd, now: float) -> bool:
    """Whether ``end`` was written: its row left ``leased`` for the state the end says, at this
    try (a row another courier leased since is at a later try)."""
    query = sa.select(S.c.state, S.c.tries).where(S.c.id == end.event.id)
    found = (await conn.execute(query)).first()
    return found is not None and found.tries == end.event.tries and found.state != "leased"


def _end_row(end: TryEnd, owner: str, now: float) -> dict[str, Any]:
    if end.delivered:
        state = EventState.DELIVERED
    elif end.retry_at is not None:
        state = EventState.PENDING
    else:
        state = EventState.FAILED
    return {
        "f_id": end.event.id,
        "f_owner": owner,
        "f_tries": end.event.tries,
        "f_state": state.value,
        "f_status": end.status,
        "f_error": end.error[:500] or None,
        "f_retry_at": end.retry_at if state is EventState.PENDING else None,
        "f_finished_at": None if state is EventState.PENDING else now,
    }


async def _failing(
    conn: AsyncConnection, endpoint_id: int, disable: str, now: float, disable_after_s: float
) -> str:
    """Note a failed try of the endpoint; why it must be disabled now, or ``""``."""
    endpoint = E.c.id == endpoint_id
    await conn.execute(
        E.update().where(endpoint & E.c.failing_since.is_(None)).values(failing_since=now)
    )
    if disable:
        return disable
    since = (await conn.execute(sa.select(E.c.failing_since).where(endpoint))).scalar()
    if since is not None and now - since >= disable_after_s:
        return f"every delivery failed for {_duration(now - since)}"
    return ""


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:g} hours"
    return f"{seconds:g} s"
