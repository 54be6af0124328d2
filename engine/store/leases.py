"""The statements over leases as a whole: a worker renewing every lease it holds, and the reaper
returning every expired one to the queue. Both find their rows through the partial lease
indexes of migration 0006 (``partial_indexes``), which serve a query only when it says
``state = 'leased'`` as a literal (``LEASED_ONLY``)."""

from __future__ import annotations

import sqlalchemy as sa

from engine.core.domain import NotificationState
from engine.store.database import picked_once
from engine.store.schema import notifications

__all__ = ["LEASED_ONLY", "reap_statement", "renew_statement"]

N = notifications
_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
# Leased rows, with the state as a literal: the lease indexes are partial on exactly this, and a
# Postgres prepared statement's generic plan uses them only when its text says so (schema.py).
LEASED_ONLY = N.c.state == sa.literal_column(f"'{_LEASED}'")


def renew_statement(owner: str, until: float, *, is_sqlite: bool) -> sa.Update:
    """Extend ``owner``'s leases to ``until``: found through ``ix_notifications_leased_owner``.
    Rows being completed right now are skipped (Postgres): they need no renewal, and waiting
    on them would invite a deadlock with the completer."""
    mine = sa.select(N.c.id).where((N.c.lease_owner == owner) & LEASED_ONLY).order_by(N.c.id)
    return (
        N.update()
        .where(N.c.id.in_(picked_once(mine, is_sqlite=is_sqlite)))
        .values(lease_expires_at=until)
    )


def reap_statement(now: float) -> sa.Update:
    """Queue again every lease expired by ``now``: found through
    ``ix_notifications_leased_expiry``."""
    return (
        N.update()
        .where(LEASED_ONLY & (N.c.lease_expires_at < now))
        .values(state=_QUEUED, lease_owner=None, lease_expires_at=None, available_at=now)
    )
