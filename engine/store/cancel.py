"""Cancelling a queued (or scheduled) notification: one conditional UPDATE, and, when it
changed nothing, the reason why (no such notification for the tenant, or one in another state).

The UPDATE is the whole decision: a row is cancelled only while it is queued or scheduled (a
promotion keeps it cancellable), so a claim that
leases it first wins and the cancel then reports it leased, in either order. The count
triggers of migration 0003 move the row from the queued count to the cancelled one in the
same transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState
from engine.core.errors import NotCancellable, NotFound
from engine.store.schema import notifications

__all__ = ["cancel_queued"]

N = notifications
_MAX_ID = 2**63 - 1  # ids are 64-bit integers in both stores
_MINE = (N.c.tenant_id == sa.bindparam("cancel_tenant")) & (N.c.id == sa.bindparam("cancel_id"))
# Built once: SQLAlchemy then finds their compiled forms in its cache.
_CANCEL = (
    N.update()
    .where(
        _MINE & N.c.state.in_([NotificationState.QUEUED.value, NotificationState.SCHEDULED.value])
    )
    .values(state=NotificationState.CANCELLED.value, finished_at=sa.bindparam("cancel_at"))
    .returning(N)
)
_STATE = sa.select(N.c.state).where(_MINE)


async def cancel_queued(
    conn: AsyncConnection, *, tenant_id: int, notification_id: int, now: float
) -> sa.Row[Any]:
    """Turn the tenant's queued or scheduled notification ``notification_id`` into a cancelled one,
    finished at ``now``; returns its row as it is now. Raises ``NotFound`` when the tenant has
    no such notification (the same sentence whether or not another tenant has one by that
    id), ``NotCancellable`` (with its state) when it is neither."""
    missing = NotFound(f"there is no notification {notification_id} for this tenant.")
    if not 0 < notification_id <= _MAX_ID:  # the drivers would fail to bind it
        raise missing
    params = {"cancel_tenant": tenant_id, "cancel_id": notification_id}
    row: sa.Row[Any] | None = (await conn.execute(_CANCEL, {**params, "cancel_at": now})).first()
    if row is not None:
        return row
    state = (await conn.execute(_STATE, params)).scalar()
    if state is None:
        raise missing
    raise NotCancellable(notification_id, NotificationState(state))
