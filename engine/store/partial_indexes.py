"""The notifications table's partial indexes (migrations 0003 and 0006), added to
``engine.store.schema.metadata`` on import.

They live apart from ``schema`` because declaring a Postgres partial index
(``postgresql_where``) imports SQLAlchemy's Postgres dialect, about 20 ms of a command's start on
SQLite. Only what makes or compares DDL imports this module: the migrations' environment and
``tests/engine/store/test_migrations.py``, which checks that the migrations create exactly
``metadata``.
"""

from __future__ import annotations

import sqlalchemy as sa

from engine.store.schema import notifications

__all__ = ["FINISHED", "LEASED_EXPIRY", "LEASED_OWNER", "PARTIAL_INDEXES", "QUEUED_DUE"]

_QUEUED_ONLY = notifications.c.state == "queued"

# Migration 0003: what keeps the hot paths bounded on a store with months of history.
# The dispatcher's due keys: how many of one key's queued rows are due (a capped range scan)
# and when its next one falls due (the first entry).
QUEUED_DUE = sa.Index(
    "ix_notifications_queued_due",
    notifications.c.tenant_id,
    notifications.c.provider_id,
    notifications.c.available_at,
    sqlite_where=_QUEUED_ONLY,
    postgresql_where=_QUEUED_ONLY,
)
# Migration 0006: the leases, and only those. A worker's renewal finds its leases by owner, the
# reaper the expired ones by expiry; queued and finished rows (nearly all of them) need no
# entry, so an enqueue and an acknowledgement write two index entries fewer per row. The
# queries must say ``state = 'leased'`` as a literal for a prepared statement's generic plan
# to use them (``queue.LEASED_ONLY``).
_LEASED_ONLY = notifications.c.state == "leased"
LEASED_OWNER = sa.Index(
    "ix_notifications_leased_owner",
    notifications.c.lease_owner,
    sqlite_where=_LEASED_ONLY,
    postgresql_where=_LEASED_ONLY,
)
LEASED_EXPIRY = sa.Index(
    "ix_notifications_leased_expiry",
    notifications.c.lease_expires_at,
    sqlite_where=_LEASED_ONLY,
    postgresql_where=_LEASED_ONLY,
)
# Retention: finished rows of one state, oldest first.
_FINISHED = notifications.c.finished_at.is_not(None)
FINISHED = sa.Index(
    "ix_notifications_finished",
    notifications.c.state,
    notifications.c.finished_at,
    sqlite_where=_FINISHED,
    postgresql_where=_FINISHED,
)

PARTIAL_INDEXES = (QUEUED_DUE, LEASED_OWNER, LEASED_EXPIRY, FINISHED)
