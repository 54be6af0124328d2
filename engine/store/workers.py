"""The workers' register: each running engine's heartbeat, read by the others (who is alive,
who shares the tenants) and by the console's Workers view."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store.database import Database
from engine.store.records import WorkerRecord
from engine.store.schema import workers

__all__ = ["WorkersRepo"]


class WorkersRepo:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def heartbeat(self, worker: WorkerRecord) -> None:
        async def tx(conn: AsyncConnection) -> None:
            values = {
                "heartbeat_at": worker.heartbeat_at,
                "state": worker.state,
                "concurrency": worker.concurrency,
                "delivered": worker.delivered,
            }
            result = await conn.execute(
                workers.update().where(workers.c.id == worker.id).values(values)
            )
            if result.rowcount == 0:
                await conn.execute(
                    workers.insert().values(
                        id=worker.id,
                        host=worker.host,
                        pid=worker.pid,
                        started_at=worker.started_at,
                        **values,
                    )
                )

        await self._db.write(tx)

    async def read(self, *, alive_since: float | None = None) -> list[WorkerRecord]:
        async def tx(conn: AsyncConnection) -> list[WorkerRecord]:
            query = sa.select(workers).order_by(workers.c.started_at)
            if alive_since is not None:
                query = query.where(
                    (workers.c.heartbeat_at >= alive_since) & (workers.c.state != "stopped")
                )
            return [WorkerRecord(**r._mapping) for r in await conn.execute(query)]

        return await self._db.read(tx)

    async def forget(self, *, before: float) -> int:
        async def tx(conn: AsyncConnection) -> int:
            result = await conn.execute(workers.delete().where(workers.c.heartbeat_at < before))
            return int(result.rowcount)

        return await self._db.write(tx)
