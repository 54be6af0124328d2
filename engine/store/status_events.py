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
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.endpoints import endpoint_of, set_enabled
from engine.store.schema import event_endpoints, notifications, providers, status_events, tenants

__all__ = [
    "DueEvent",
    "EndpointHealth",
    "EventRow",
    "StatusEventsRepo",
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


@dataclass(frozen=True, slots=True)
class EventRow:
    """One event as an operator sees it (``omnipost webhook events``, the console)."""

    id: int
    endpoint_id: int
    notification_id: int | None
    type: str
    state: str
    occurred_at: float
    tries: int
    available_at: float
    last_status: int | None
    last_error: str | None
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    endpoint_id: int
    pending: int
    failed: int  # given up
    held: int
    oldest_pending_at: float | None


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
        self,
        event: DueEvent,
        owner: str,
        *,
        delivered: bool,
        retry_at: float | None,
        status: int | None,
        error: str,
        now: float,
        disable_after_s: float,
        disable_now: str = "",
    ) -> str:
        """Write one try's end while its lease holds: delivered, due again at ``retry_at``, or
        (neither) given up. The endpoint's health follows: a delivery clears its failing time;
        a failure starts it, and disables the endpoint once it has failed every try for
        ``disable_after_s``, or at once with ``disable_now`` (a 410). Returns the reason it was
        disabled for, or ``""``."""
        if delivered:
            state = EventState.DELIVERED
        elif retry_at is not None:
            state = EventState.PENDING
        else:
            state = EventState.FAILED
        values: dict[str, Any] = {
            "state": state,
            "lease_owner": None,
            "lease_expires_at": None,
            "last_status": status,
            "last_error": error[:500] or None,
        }
        if state is EventState.PENDING:
            values["available_at"] = retry_at
        else:
            values["finished_at"] = now
        fenced = S.update().where(
            (S.c.id == event.id)
            & (S.c.lease_owner == owner)
            & (S.c.tries == event.tries)
            & (S.c.state == EventState.LEASED)
        )

        async def tx(conn: AsyncConnection) -> str:
            if not (await conn.execute(fenced.values(values))).rowcount:
                return ""
            endpoint = E.c.id == event.endpoint_id
            if delivered:
                await conn.execute(
                    E.update()
                    .where(endpoint & E.c.failing_since.is_not(None))
                    .values(failing_since=None)
                )
                return ""
            await conn.execute(
                E.update().where(endpoint & E.c.failing_since.is_(None)).values(failing_since=now)
            )
            reason = disable_now
            if not reason:
                since = (await conn.execute(sa.select(E.c.failing_since).where(endpoint))).scalar()
                if since is not None and now - since >= disable_after_s:
                    reason = f"every delivery failed for {_duration(now - since)}"
            if reason and await set_enabled(
                conn, None, event.endpoint_id, False, reason, now, "courier"
            ):
                return reason
            return ""

        return await self._db.write(tx)

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

    async def replay(
        self,
        tenant_id: int,
        *,
        since: float,
        endpoint_id: int | None,
        now: float,
        actor: str,
    ) -> int:
        """Send the tenant's events since ``since`` (delivered or given up) again, with their
        ids (a receiver that keeps them sees repeats); returns how many. Events of a disabled
        endpoint wait until it is enabled."""

        async def tx(conn: AsyncConnection) -> int:
            cond = (
                (S.c.tenant_id == tenant_id)
                & (S.c.occurred_at >= since)
                & S.c.state.in_([EventState.DELIVERED, EventState.FAILED])
            )
            if endpoint_id is not None:
                await endpoint_of(conn, tenant_id, endpoint_id)
                cond &= S.c.endpoint_id == endpoint_id
            enabled = sa.select(E.c.id).where(E.c.disabled_at.is_(None)).scalar_subquery()
            state = sa.case(
                (S.c.endpoint_id.in_(enabled), EventState.PENDING), else_=EventState.HELD
            )
            result = await conn.execute(
                S.update()
                .where(cond)
                .values(state=state, tries=0, available_at=now, finished_at=None)
            )
            replayed = int(result.rowcount)
            detail = {"since": since, "events": replayed}
            if endpoint_id is not None:
                detail["endpoint"] = endpoint_id
            await write_audit(conn, now, actor, "webhook.replay", tenant_id, detail)
            return replayed

        return await self._db.write(tx)

    async def health(self, endpoint_ids: Sequence[int]) -> dict[int, EndpointHealth]:
        """Each endpoint's events not delivered, by state, and the oldest waiting: read along
        the partial index of those (``ix_status_events_undelivered``), so the cost follows what
        waits or was given up (which retention prunes), never the events delivered."""

        async def tx(conn: AsyncConnection) -> dict[int, EndpointHealth]:
            if not endpoint_ids:
                return {}
            query = (
                sa.select(S.c.endpoint_id, S.c.state, sa.func.count(), sa.func.min(S.c.occurred_at))
                .where(
                    S.c.endpoint_id.in_(list(endpoint_ids)) & (S.c.state != EventState.DELIVERED)
                )
                .group_by(S.c.endpoint_id, S.c.state)
            )
            counts: dict[int, dict[str, tuple[int, float | None]]] = {}
            for eid, state, n, oldest in await conn.execute(query):
                counts.setdefault(eid, {})[state] = (int(n), oldest)
            found = {}
            for eid in endpoint_ids:
                by = counts.get(eid, {})
                waiting = [by[s] for s in (EventState.PENDING, EventState.LEASED) if s in by]
                oldest = min((o for _, o in waiting if o is not None), default=None)
                found[eid] = EndpointHealth(
                    eid,
                    sum(n for n, _ in waiting),
                    by.get(EventState.FAILED, (0, None))[0],
                    by.get(EventState.HELD, (0, None))[0],
                    oldest,
                )
            return found

        return await self._db.read(tx)

    async def events(
        self, tenant_id: int, *, endpoint_id: int | None = None, limit: int = 50
    ) -> list[EventRow]:
        """The tenant's newest events (or one endpoint's), newest first."""

        async def tx(conn: AsyncConnection) -> list[EventRow]:
            cond = S.c.tenant_id == tenant_id
            if endpoint_id is not None:
                cond &= S.c.endpoint_id == endpoint_id
            query = (
                sa.select(
                    S.c.id,
                    S.c.endpoint_id,
                    S.c.notification_id,
                    S.c.type,
                    S.c.state,
                    S.c.occurred_at,
                    S.c.tries,
                    S.c.available_at,
                    S.c.last_status,
                    S.c.last_error,
                    S.c.finished_at,
                )
                .where(cond)
                .order_by(S.c.id.desc())
                .limit(limit)
            )
            return [EventRow(*r) for r in await conn.execute(query)]

        return await self._db.read(tx)

    async def prune(self, before: float, *, limit: int = 10_000) -> int:
        """Finished events (delivered or given up) older than ``before``, at most ``limit`` of
        them, deleted; returns how many."""

        async def tx(conn: AsyncConnection) -> int:
            old = (
                sa.select(S.c.id)
                .where(
                    (S.c.finished_at < before)
                    & S.c.state.in_([EventState.DELIVERED, EventState.FAILED])
                )
                .limit(limit)
                .scalar_subquery()
            )
            return int((await conn.execute(S.delete().where(S.c.id.in_(old)))).rowcount)

        return await self._db.write(tx)

    async def highest_id(self) -> int:
        """The newest event's id (the primary key's last entry): how many were ever written,
        give or take the ids of transactions rolled back (a Postgres sequence skips them)."""

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(sa.select(sa.func.max(S.c.id)))).scalar() or 0)

        return await self._db.read(tx)


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


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:g} hours"
    return f"{seconds:g} s"
