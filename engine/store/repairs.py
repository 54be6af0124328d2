"""The queue's repairs: dead letters queued again or discarded, and queued ones cancelled.

Each takes the tenant's id; ``QueueRepo`` inherits them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState
from engine.store.cancel import cancel_queued
from engine.store.notify import CHANNEL
from engine.store.reads import QueueReads
from engine.store.records import NotificationView
from engine.store.schema import notifications
from engine.store.suppressions import SUPPRESSED_DETAIL, suppressed_of

__all__ = ["QueueRepairs"]

N = notifications
_QUEUED = NotificationState.QUEUED.value
_DEAD = NotificationState.DEAD.value
_SUPPRESSED = NotificationState.SUPPRESSED.value


class QueueRepairs(QueueReads):
    async def dead_retry(self, tenant_id: int, ids: Sequence[int] | None, *, now: float) -> int:
        """``dead_retry_counts``'s first figure: how many were queued again."""
        return (await self.dead_retry_counts(tenant_id, ids, now=now))[0]

    async def dead_retry_counts(
        self, tenant_id: int, ids: Sequence[int] | None, *, now: float
    ) -> tuple[int, int]:
        """Queue dead notifications again with a fresh attempt budget; ``None`` means all of the
        tenant's dead ones. One whose recipient the tenant has since suppressed for its
        provider (a recipient that replied STOP, whose answer made it dead) becomes
        ``suppressed`` instead, never sent. Returns how many were queued again and how many
        were suppressed."""

        async def tx(conn: AsyncConnection) -> tuple[int, int]:
            dead = _dead(tenant_id, ids)
            gone = await suppressed_of(conn, self._box, tenant_id, dead)
            if gone:
                await conn.execute(
                    N.update()
                    .where(dead & N.c.id.in_(gone))
                    .values(state=_SUPPRESSED, finished_at=now, last_error=SUPPRESSED_DETAIL)
                )
            result = await conn.execute(
                N.update()
                .where(dead)
                .values(state=_QUEUED, failures=0, available_at=now, finished_at=None)
            )
            if result.rowcount and not self._db.is_sqlite:
                await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, self._db.origin)))
            return int(result.rowcount), len(gone)

        return await self._db.write(tx)

    async def dead_discard(self, tenant_id: int, ids: Sequence[int] | None) -> int:
        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(N.delete().where(_dead(tenant_id, ids)))).rowcount)

        return await self._db.write(tx)

    async def cancel(self, tenant_id: int, notification_id: int, *, now: float) -> NotificationView:
        """Cancel one queued notification of the tenant: ``engine.store.cancel`` says how,
        and what it raises."""
        found = functools.partial(
            cancel_queued, tenant_id=tenant_id, notification_id=notification_id, now=now
        )
        return self._view(await self._db.write(found))


def _dead(tenant_id: int, ids: Sequence[int] | None) -> sa.ColumnElement[bool]:
    cond = (N.c.tenant_id == tenant_id) & (N.c.state == _DEAD)
    return cond if ids is None else cond & N.c.id.in_(list(ids))
