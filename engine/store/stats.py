"""Aggregates across tenants for operators: counts only, never a tenant's data."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import Outcome
from engine.store.database import Database
from engine.store.records import SendSample
from engine.store.schema import delivery_log

__all__ = ["StatsRepo"]


class StatsRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def outcomes_since(self, since: float) -> dict[Outcome, int]:
        """How many sends ended in each outcome (by any worker) since ``since`` (unix s)."""

        query: sa.Executable = (
            sa.select(delivery_log.c.outcome, sa.func.count())
            .where(delivery_log.c.ts >= since)
            .group_by(delivery_log.c.outcome)
        )
        if self._db.is_sqlite:
            # Statistics without a histogram make SQLite guess that a quarter of the log
            # matches, and scan all of it; named, the index reads only the recent rows.
            query = sa.text(
                "SELECT outcome, count(*) FROM delivery_log INDEXED BY ix_delivery_log_ts"
                " WHERE ts >= :since GROUP BY outcome"
            ).bindparams(since=since)

        async def tx(conn: AsyncConnection) -> dict[Outcome, int]:
            counts = dict.fromkeys(Outcome, 0)
            for outcome, count in await conn.execute(query):
                counts[Outcome(outcome)] = int(count)
            return counts

        return await self._db.read(tx)

    async def recent_sends(self, limit: int) -> list[SendSample]:
        """The last ``limit`` sends of any provider, newest first: what the planner models a
        real provider on. One range of the log's primary key, however long the log."""
        L = delivery_log
        query = (
            sa.select(L.c.provider_id, L.c.outcome, L.c.send_s, L.c.ts)
            .order_by(L.c.id.desc())
            .limit(limit)
        )

        async def tx(conn: AsyncConnection) -> list[SendSample]:
            return [
                SendSample(r.provider_id, Outcome(r.outcome), r.send_s, r.ts)
                for r in await conn.execute(query)
            ]

        return await self._db.read(tx)
