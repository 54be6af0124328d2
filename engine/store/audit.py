"""The audit log: who changed what and when, each entry written in the transaction of the
change it records (``write_audit``), read newest first."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import Limit
from engine.store.database import Database
from engine.store.records import AuditEntry
from engine.store.schema import audit_log

__all__ = ["AuditRepo", "write_audit"]


class AuditRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def write(
        self, actor: str, action: str, tenant_id: int | None, detail: dict[str, Any], *, now: float
    ) -> None:
        async def tx(conn: AsyncConnection) -> None:
            await write_audit(conn, now, actor, action, tenant_id, detail)

        await self._db.write(tx)

    async def entries(self, *, limit: int = 100) -> list[AuditEntry]:
        async def tx(conn: AsyncConnection) -> list[AuditEntry]:
            query = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
            return [
                AuditEntry(r.id, r.ts, r.actor, r.action, r.tenant_id, json.loads(r.detail))
                for r in await conn.execute(query)
            ]

        return await self._db.read(tx)


def _json_default(value: object) -> object:
    if isinstance(value, Limit):
        return {"rate_per_s": value.rate_per_s, "burst": value.burst}
    return str(value)


async def write_audit(
    conn: AsyncConnection,
    now: float,
    actor: str,
    action: str,
    tenant_id: int | None,
    detail: dict[str, Any],
) -> None:
    """One audit-log row, written in the caller's transaction (with the change it records)."""
    await conn.execute(
        audit_log.insert().values(
            ts=now,
            actor=actor[:100],
            action=action,
            tenant_id=tenant_id,
            detail=json.dumps(detail, default=_json_default, sort_keys=True),
        )
    )
