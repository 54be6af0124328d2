"""Tenant API keys: the prefix and the SHA-256 of each key, never the key (migration 0008)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.errors import Conflict, NotFound
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.records import ApiKeyRecord
from engine.store.schema import api_keys, tenants

__all__ = ["ApiKeyRepo"]

_COLUMNS = (
    api_keys.c.id,
    tenants.c.name,
    api_keys.c.prefix,
    api_keys.c.name,
    api_keys.c.scope,
    api_keys.c.created_at,
    api_keys.c.last_used_at,
    api_keys.c.revoked_at,
)
_JOINED = api_keys.join(tenants, tenants.c.id == api_keys.c.tenant_id)


def _record(row: Sequence[Any]) -> ApiKeyRecord:
    key_id, tenant, prefix, name, scope, created, used, revoked = row
    return ApiKeyRecord(
        key_id, tenant, prefix, name, tuple(scope.split(",")), created, used, revoked
    )


class ApiKeyRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self,
        tenant: str,
        *,
        prefix: str,
        digest: str,
        name: str,
        scope: tuple[str, ...],
        now: float,
        actor: str,
    ) -> ApiKeyRecord:
        """Keep a new key of ``tenant`` (NotFound when there is none), audited without the key."""

        async def tx(conn: AsyncConnection) -> ApiKeyRecord:
            row = (
                await conn.execute(sa.select(tenants.c.id).where(tenants.c.name == tenant))
            ).first()
            if row is None:
                raise NotFound(f"no tenant named {tenant!r}.")
            values = {
                "tenant_id": row[0],
                "prefix": prefix,
                "digest": digest,
                "name": name,
                "scope": ",".join(scope),
                "created_at": now,
            }
            key_id = (await conn.execute(api_keys.insert().values(values))).inserted_primary_key
            assert key_id is not None
            detail = {"id": key_id[0], "prefix": prefix, "name": name, "scope": ",".join(scope)}
            await write_audit(conn, now, actor, "apikey.create", row[0], detail)
            return ApiKeyRecord(key_id[0], tenant, prefix, name, scope, now, None, None)

        return await self._db.write(tx)

    async def listing(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """Every key (of ``tenant`` only, when given; NotFound when there is no such tenant),
        oldest first."""

        async def tx(conn: AsyncConnection) -> list[ApiKeyRecord]:
            query = sa.select(*_COLUMNS).select_from(_JOINED).order_by(api_keys.c.id)
            if tenant is not None:
                found = await conn.execute(sa.select(tenants.c.id).where(tenants.c.name == tenant))
                if found.first() is None:
                    raise NotFound(f"no tenant named {tenant!r}.")
                query = query.where(tenants.c.name == tenant)
            return [_record(row) for row in await conn.execute(query)]

        return await self._db.read(tx)

    async def revoke(self, key_id: int, *, now: float, actor: str) -> ApiKeyRecord:
        """Revoke key ``key_id`` (NotFound when there is none, Conflict when it already is)."""

        async def tx(conn: AsyncConnection) -> ApiKeyRecord:
            query = sa.select(*_COLUMNS, api_keys.c.tenant_id).select_from(_JOINED)
            row = (await conn.execute(query.where(api_keys.c.id == key_id))).first()
            if row is None:
                raise NotFound(f"no api key {key_id}.")
            record = _record(row[:-1])
            if record.revoked_at is not None:
                raise Conflict(f"api key {key_id} ({record.prefix}) is already revoked.")
            await conn.execute(
                api_keys.update().where(api_keys.c.id == key_id).values(revoked_at=now)
            )
            detail = {"id": key_id, "prefix": record.prefix, "name": record.name}
            await write_audit(conn, now, actor, "apikey.revoke", row[-1], detail)
            return dataclasses.replace(record, revoked_at=now)

        return await self._db.write(tx)

    async def find(self, prefix: str) -> tuple[ApiKeyRecord, str] | None:
        """The key whose public prefix is ``prefix`` and its digest, revoked or not."""

        async def tx(conn: AsyncConnection) -> tuple[ApiKeyRecord, str] | None:
            query = sa.select(*_COLUMNS, api_keys.c.digest).select_from(_JOINED)
            row = (await conn.execute(query.where(api_keys.c.prefix == prefix))).first()
            return None if row is None else (_record(row[:-1]), row[-1])

        return await self._db.read(tx)

    async def used(self, key_id: int, now: float) -> None:
        """Record that key ``key_id`` was used at ``now``."""

        async def tx(conn: AsyncConnection) -> None:
            update = api_keys.update().where(api_keys.c.id == key_id)
            await conn.execute(update.values(last_used_at=now))

        await self._db.write(tx)
