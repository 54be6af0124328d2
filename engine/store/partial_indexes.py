"""The notifications table's partial indexes (migrations 0003, 0006 and 0011), added to
``engine.store.schema.metadata`` on import.

They live apart from ``schema`` because declaring a Postgres partial index
(``postgresql_where``) imports SQLAlchemy's Postgres dialect, about 20 ms of a command's start on
SQLite. Only what makes or compares DDL imports this module: the migrations' environment and
``tests/engine/store/test_migrations.py``, which checks that the migrations create exactly
``metadata``.
"""

from __future__ import annotations

import sqlalchemy as sa

from engine.store.schema import notifications, status_events

__all__ = [
    "FINISHED",
    "LEASED_EXPIRY",
    "LEASED_OWNER",
    "PARTIAL_INDEXES",
    "QUEUED_DUE",
    "SCHEDULED_DUE",
    "STATUS_EVENTS_DUE",
    "STATUS_EVENTS_FINISHED",
    "STATUS_EVENTS_LEASED",
    "STATUS_EVENTS_UNDELIVERED",
    "WAITING_EXPIRY",
]

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
# to use them (``leases.LEASED_ONLY``).
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

# Migration 0011: scheduled rows by send time (the promotion of those due finds them without a
# scan), and the rows with a deadline that nobody has claimed (the sweep that expires them).
_SCHEDULED_ONLY = notifications.c.state == "scheduled"
SCHEDULED_DUE = sa.Index(
    "ix_notifications_scheduled_due",
    notifications.c.available_at,
    sqlite_where=_SCHEDULED_ONLY,
    postgresql_where=_SCHEDULED_ONLY,
)
_WAITING_DEADLINE = notifications.c.state.in_(["queued", "scheduled"]) & (
    notifications.c.expires_at.is_not(None)
)
WAITING_EXPIRY = sa.Index(
    "ix_notifications_waiting_expiry",
    notifications.c.expires_at,
    sqlite_where=_WAITING_DEADLINE,
    postgresql_where=_WAITING_DEADLINE,
)

# Migration 0012: the outbox's pending events by due time (the courier's claim), and its leased
# ones by expiry (the reaper's).
_PENDING_EVENT = status_events.c.state == "pending"
STATUS_EVENTS_DUE = sa.Index(
    "ix_status_events_due",
    status_events.c.available_at,
    sqlite_where=_PENDING_EVENT,
    postgresql_where=_PENDING_EVENT,
)
_LEASED_EVENT = status_events.c.state == "leased"
STATUS_EVENTS_LEASED = sa.Index(
    "ix_status_events_lease",
    status_events.c.lease_expires_at,
    sqlite_where=_LEASED_EVENT,
    postgresql_where=_LEASED_EVENT,
)
# The events not delivered, by endpoint: what ``webhook list``, the console and the metrics count.
_UNDELIVERED = status_events.c.state != "delivered"
STATUS_EVENTS_UNDELIVERED = sa.Index(
    "ix_status_events_undelivered",
    status_events.c.endpoint_id,
    status_events.c.state,
    status_events.c.occurred_at,
    sqlite_where=_UNDELIVERED,
    postgresql_where=_UNDELIVERED,
)

# Retention: the events delivered or given up, oldest first; waiting ones need no entry.
_FINISHED_EVENT = status_events.c.finished_at.is_not(None)
STATUS_EVENTS_FINISHED = sa.Index(
    "ix_status_events_finished",
    status_events.c.finished_at,
    sqlite_where=_FINISHED_EVENT,
    postgresql_where=_FINISHED_EVENT,
)

PARTIAL_INDEXES = (
    QUEUED_DUE,
    LEASED_OWNER,
    LEASED_EXPIRY,
    FINISHED,
    SCHEDULED_DUE,
    WAITING_EXPIRY,
    STATUS_EVENTS_DUE,
    STATUS_EVENTS_LEASED,
    STATUS_EVENTS_UNDELIVERED,
    STATUS_EVENTS_FINISHED,
)
