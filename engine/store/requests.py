"""Idempotent HTTP requests: what a tenant's ``Idempotency-Key`` stands for (migration 0009).

A request with a key first *claims* it: a new key is inserted with the body's fingerprint and
a lease held by the claiming server (``owner``, ``locked_until``); a key whose answer is kept
is a replay (same fingerprint) or a mismatch (another body); a key under an unexpired lease is
in flight; a key whose lease ran out (its server died mid-request) is taken over by the claim.
The owner then *finishes* it (the answer is kept, the lease dropped) or *abandons* it (the row
goes, so the client may try again at once). Finishing and abandoning name the owner, so a
server whose lease was taken over cannot overwrite its successor's answer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.database import Database
from engine.store.schema import api_requests

__all__ = ["ClaimKind", "RequestClaim", "RequestRepo"]

R = api_requests


class ClaimKind(enum.StrEnum):
    NEW = "new"  # this caller owns the key now: do the work, then finish or abandon
    REPLAY = "replay"  # done before with the same body: answer ``status`` and ``response``
    MISMATCH = "mismatch"  # the key was used with another body
    IN_FLIGHT = "in_flight"  # another request with this key is under way


@dataclass(frozen=True, slots=True)
class RequestClaim:
    kind: ClaimKind
    status: int | None = None
    response: str | None = None
    retry_after_s: float = 0.0


class RequestRepo:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._insert = db.insert

    async def claim(
        self,
        tenant_id: int,
        key: str,
        fingerprint: str,
        *,
        owner: str,
        lease_s: float,
        now: float,
    ) -> RequestClaim:
        """Claim ``key`` of ``tenant_id`` for ``owner`` until ``now + lease_s``, or say why not."""
        insert = (
            self._insert(R)
            .values(
                tenant_id=tenant_id,
                idem_key=key,
                fingerprint=fingerprint,
                owner=owner,
                locked_until=now + lease_s,
                created_at=now,
            )
            .on_conflict_do_nothing(index_elements=[R.c.tenant_id, R.c.idem_key])
            .returning(R.c.id)
        )
        mine = (R.c.tenant_id == tenant_id) & (R.c.idem_key == key)

        async def tx(conn: AsyncConnection) -> RequestClaim:
            if (await conn.execute(insert)).first() is not None:
                return RequestClaim(ClaimKind.NEW)
            query = sa.select(R.c.fingerprint, R.c.status, R.c.response, R.c.locked_until)
            row = (await conn.execute(query.where(mine))).first()
            if row is None:  # deleted (abandoned) between the two statements: try again
                return RequestClaim(ClaimKind.IN_FLIGHT, retry_after_s=1.0)
            if row.fingerprint != fingerprint:
                return RequestClaim(ClaimKind.MISMATCH)
            if row.status is not None:
                return RequestClaim(ClaimKind.REPLAY, row.status, row.response)
            if row.locked_until is not None and row.locked_until > now:
                return RequestClaim(ClaimKind.IN_FLIGHT, retry_after_s=row.locked_until - now)
            take = (
                sa.update(R)
                .where(mine & R.c.status.is_(None) & (R.c.locked_until <= now))
                .values(owner=owner, locked_until=now + lease_s)
            )
            if (await conn.execute(take)).rowcount == 1:  # its server died: take it over
                return RequestClaim(ClaimKind.NEW)
            return RequestClaim(ClaimKind.IN_FLIGHT, retry_after_s=1.0)

        return await self._db.write(tx)

    async def finish(
        self,
        tenant_id: int,
        key: str,
        *,
        owner: str,
        status: int,
        response: str,
        notification_id: int | None,
    ) -> bool:
        """Keep the answer to replay; False when ``owner`` no longer holds the key."""
        stmt = (
            sa.update(R)
            .where((R.c.tenant_id == tenant_id) & (R.c.idem_key == key) & (R.c.owner == owner))
            .values(
                status=status,
                response=response,
                notification_id=notification_id,
                owner=None,
                locked_until=None,
            )
        )
        return await self._write_one(stmt)

    async def abandon(self, tenant_id: int, key: str, *, owner: str) -> bool:
        """Forget a claim whose request failed, so that the key is free again."""
        stmt = sa.delete(R).where(
            (R.c.tenant_id == tenant_id)
            & (R.c.idem_key == key)
            & (R.c.owner == owner)
            & R.c.status.is_(None)
        )
        return await self._write_one(stmt)

    async def _write_one(self, stmt: Any) -> bool:
        async def tx(conn: AsyncConnection) -> bool:
            return bool((await conn.execute(stmt)).rowcount == 1)

        return await self._db.write(tx)
