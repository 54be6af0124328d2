"""A tenant's endpoints for status events: added, listed, removed, their secret rotated
(encrypted at rest: it must be read to sign), enabled and disabled; every change audited, never
with a secret. Their outbox: ``engine/store/status_events.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.errors import NotFound
from engine.core.status_events import EventState
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.schema import event_endpoints, status_events, tenants

__all__ = ["EndpointRecord", "EndpointSecrets", "EndpointsRepo", "endpoint_of", "set_enabled"]

E, S = event_endpoints, status_events


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    id: int
    tenant_id: int
    url: str
    events: int  # a mask of EventType.bit
    allow_private: bool
    rate_per_s: float | None
    burst: float | None
    created_at: float
    disabled_at: float | None
    disabled_reason: str | None
    failing_since: float | None
    old_secret_until: float | None  # while in the future, the old secret signs too


_RECORD_COLUMNS = (
    E.c.id,
    E.c.tenant_id,
    E.c.url,
    E.c.events,
    E.c.allow_private,
    E.c.rate_per_s,
    E.c.burst,
    E.c.created_at,
    E.c.disabled_at,
    E.c.disabled_reason,
    E.c.failing_since,
    E.c.old_secret_until,
)


def _record(row: Any) -> EndpointRecord:
    return EndpointRecord(
        row.id,
        row.tenant_id,
        row.url,
        row.events,
        bool(row.allow_private),
        row.rate_per_s,
        row.burst,
        row.created_at,
        row.disabled_at,
        row.disabled_reason,
        row.failing_since,
        row.old_secret_until,
    )


async def endpoint_of(conn: AsyncConnection, tenant_id: int, endpoint_id: int) -> EndpointRecord:
    """The tenant's endpoint ``endpoint_id``; NotFound when it has no such one."""
    row = (
        await conn.execute(
            sa.select(*_RECORD_COLUMNS).where(
                (E.c.id == endpoint_id) & (E.c.tenant_id == tenant_id)
            )
        )
    ).first()
    if row is None:
        raise NotFound(f"the tenant has no webhook endpoint {endpoint_id}.")
    return _record(row)


async def set_enabled(
    conn: AsyncConnection,
    tenant_id: int | None,
    endpoint_id: int,
    enabled: bool,
    reason: str,
    now: float,
    actor: str,
) -> bool:
    cond = E.c.id == endpoint_id
    if tenant_id is not None:
        cond &= E.c.tenant_id == tenant_id
    row = (await conn.execute(sa.select(E.c.tenant_id, E.c.disabled_at).where(cond))).first()
    if row is None:
        raise NotFound(f"the tenant has no webhook endpoint {endpoint_id}.")
    if (row.disabled_at is None) == enabled:
        return False
    if enabled:
        values: dict[str, Any] = {
            "disabled_at": None,
            "disabled_reason": None,
            "failing_since": None,
        }
        moved = (EventState.HELD, EventState.PENDING)
    else:
        values = {"disabled_at": now, "disabled_reason": reason[:300]}
        moved = (EventState.PENDING, EventState.HELD)
    await conn.execute(E.update().where(E.c.id == endpoint_id).values(values))
    events = S.update().where((S.c.endpoint_id == endpoint_id) & (S.c.state == moved[0]))
    new: dict[str, Any] = {"state": moved[1]}
    if enabled:
        new["available_at"] = now
    await conn.execute(events.values(new))
    action = "webhook.enable" if enabled else "webhook.disable"
    detail = {"endpoint": endpoint_id, **({} if enabled else {"reason": reason[:300]})}
    await write_audit(conn, now, actor, action, row.tenant_id, detail)
    return True


@dataclass(frozen=True, slots=True)
class EndpointSecrets:
    """What the courier needs to reach and sign for one endpoint; never shown."""

    id: int
    tenant: str
    url: str
    allow_private: bool
    rate_per_s: float | None
    burst: float | None
    secrets: tuple[str, ...]  # decrypted, newest first
    enabled: bool


class EndpointsRepo:
    """Every read and write of the endpoints; each of a tenant's takes its id."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    async def add_endpoint(
        self,
        tenant_id: int,
        *,
        url: str,
        events: int,
        secret: str,
        allow_private: bool,
        rate_per_s: float | None,
        burst: float | None,
        now: float,
        actor: str,
    ) -> EndpointRecord:
        sealed = self._box.encrypt(secret)

        async def tx(conn: AsyncConnection) -> EndpointRecord:
            new_id = (
                await conn.execute(
                    E.insert()
                    .values(
                        tenant_id=tenant_id,
                        url=url,
                        events=events,
                        secret=sealed,
                        allow_private=allow_private,
                        rate_per_s=rate_per_s,
                        burst=burst,
                        created_at=now,
                    )
                    .returning(E.c.id)
                )
            ).scalar_one()
            detail = {"endpoint": new_id, "url": url, "events": events}
            if allow_private:
                detail["allow_private"] = True
            await write_audit(conn, now, actor, "webhook.add", tenant_id, detail)
            return await endpoint_of(conn, tenant_id, new_id)

        return await self._db.write(tx)

    async def endpoints(self, tenant_id: int) -> list[EndpointRecord]:
        async def tx(conn: AsyncConnection) -> list[EndpointRecord]:
            query = sa.select(*_RECORD_COLUMNS).where(E.c.tenant_id == tenant_id).order_by(E.c.id)
            return [_record(r) for r in await conn.execute(query)]

        return await self._db.read(tx)

    async def endpoint(self, tenant_id: int, endpoint_id: int) -> EndpointRecord:
        async def tx(conn: AsyncConnection) -> EndpointRecord:
            return await endpoint_of(conn, tenant_id, endpoint_id)

        return await self._db.read(tx)

    async def all_endpoints(self, *, limit: int = 1000) -> list[EndpointRecord]:
        """Every tenant's endpoints (the console's and the metrics' view), at most ``limit``."""

        async def tx(conn: AsyncConnection) -> list[EndpointRecord]:
            query = sa.select(*_RECORD_COLUMNS).order_by(E.c.id).limit(limit)
            return [_record(r) for r in await conn.execute(query)]

        return await self._db.read(tx)

    async def remove_endpoint(
        self, tenant_id: int, endpoint_id: int, *, now: float, actor: str
    ) -> None:
        """The endpoint and every event to it, gone. NotFound when the tenant has no such one."""

        async def tx(conn: AsyncConnection) -> None:
            found = await endpoint_of(conn, tenant_id, endpoint_id)
            # The tenant's rows (its index), of this endpoint.
            mine = (S.c.tenant_id == tenant_id) & (S.c.endpoint_id == endpoint_id)
            await conn.execute(S.delete().where(mine))
            await conn.execute(E.delete().where(E.c.id == endpoint_id))
            detail = {"endpoint": endpoint_id, "url": found.url}
            await write_audit(conn, now, actor, "webhook.remove", tenant_id, detail)

        await self._db.write(tx)

    async def rotate_secret(
        self,
        tenant_id: int,
        endpoint_id: int,
        *,
        secret: str,
        grace_until: float,
        now: float,
        actor: str,
    ) -> EndpointRecord:
        """Sign with ``secret`` from now on, and with the one it replaces as well until
        ``grace_until`` (a secret older than that is dropped)."""
        sealed = self._box.encrypt(secret)

        async def tx(conn: AsyncConnection) -> EndpointRecord:
            await endpoint_of(conn, tenant_id, endpoint_id)
            keep_old = grace_until > now
            await conn.execute(
                E.update()
                .where(E.c.id == endpoint_id)
                .values(
                    old_secret=E.c.secret if keep_old else None,
                    old_secret_until=grace_until if keep_old else None,
                    secret=sealed,
                )
            )
            detail = {"endpoint": endpoint_id, "old_secret_until": grace_until if keep_old else 0}
            await write_audit(conn, now, actor, "webhook.rotate_secret", tenant_id, detail)
            return await endpoint_of(conn, tenant_id, endpoint_id)

        return await self._db.write(tx)

    async def set_enabled(
        self,
        tenant_id: int | None,
        endpoint_id: int,
        *,
        enabled: bool,
        reason: str,
        now: float,
        actor: str,
    ) -> bool:
        """Enable or disable an endpoint (``tenant_id`` None: the courier's own decision, the
        endpoint's tenant is read). A disabled endpoint's pending events wait ``held``; enabled
        again, they are due at once. Returns whether it changed."""

        async def tx(conn: AsyncConnection) -> bool:
            return await set_enabled(conn, tenant_id, endpoint_id, enabled, reason, now, actor)

        return await self._db.write(tx)

    async def secrets(self, endpoint_ids: Sequence[int], now: float) -> dict[int, EndpointSecrets]:
        """What the courier needs for each of ``endpoint_ids`` (those that still exist)."""

        async def tx(conn: AsyncConnection) -> dict[int, EndpointSecrets]:
            query = (
                sa.select(
                    E.c.id,
                    tenants.c.name,
                    E.c.url,
                    E.c.allow_private,
                    E.c.rate_per_s,
                    E.c.burst,
                    E.c.secret,
                    E.c.old_secret,
                    E.c.old_secret_until,
                    E.c.disabled_at,
                )
                .join(tenants, tenants.c.id == E.c.tenant_id)
                .where(E.c.id.in_(list(endpoint_ids)))
            )
            found = {}
            for r in await conn.execute(query):
                sealed = [r.secret]
                if r.old_secret is not None and (r.old_secret_until or 0) > now:
                    sealed.append(r.old_secret)
                found[r.id] = EndpointSecrets(
                    r.id,
                    r.name,
                    r.url,
                    bool(r.allow_private),
                    r.rate_per_s,
                    r.burst,
                    tuple(self._box.decrypt(s) for s in sealed),
                    r.disabled_at is None,
                )
            return found

        return await self._db.read(tx)
