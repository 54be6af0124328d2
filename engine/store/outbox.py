"""The outbox as operators see it: each endpoint's events not delivered (and the oldest of
them), a tenant's newest events with what each try answered, the replay of past events, and the
prune of old ones. The courier's side (claims, finishes, leases): ``status_events.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.status_events import EventState
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.endpoints import endpoint_of
from engine.store.schema import event_endpoints, status_events

__all__ = ["EndpointHealth", "EventRow", "OutboxRepo"]

E, S = event_endpoints, status_events


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


class OutboxRepo:
    """Reads and operator's changes of the outbox; each of a tenant's takes its id."""

    def __init__(self, db: Database) -> None:
        self._db = db

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
                .order_by(S.c.occurred_at.desc(), S.c.id.desc())  # along the tenant's index
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
