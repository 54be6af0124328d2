"""A notification's useful life: a time to send it, and a deadline past which it is not sent.

- ``notifications.expires_at``: never sent after this (unix s); NULL, no deadline. A row whose
  ``available_at`` lies ahead when it is enqueued is inserted ``scheduled`` (a state, no column).
- ``tenants.default_ttl_s``: the deadline, in seconds after their send time, of the tenant's
  notifications that name none.
- ``ix_notifications_scheduled_due``: scheduled rows by send time, for the promotion of the due
  ones; ``ix_notifications_waiting_expiry``: unclaimed rows with a deadline, by deadline, for the
  sweep that expires them. Both partial: rows without a schedule or a deadline cost no entry.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_SCHEDULED = sa.text("state = 'scheduled'")
_WAITING = sa.text("state IN ('queued', 'scheduled') AND expires_at IS NOT NULL")


def upgrade() -> None:
    op.add_column("notifications", sa.Column("expires_at", sa.Double, nullable=True))
    op.add_column("tenants", sa.Column("default_ttl_s", sa.Double, nullable=True))
    op.create_index(
        "ix_notifications_scheduled_due",
        "notifications",
        ["available_at"],
        sqlite_where=_SCHEDULED,
        postgresql_where=_SCHEDULED,
    )
    op.create_index(
        "ix_notifications_waiting_expiry",
        "notifications",
        ["expires_at"],
        sqlite_where=_WAITING,
        postgresql_where=_WAITING,
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_waiting_expiry", "notifications")
    op.drop_index("ix_notifications_scheduled_due", "notifications")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("default_ttl_s")
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("expires_at")
