"""Partial indexes on the leases: the owner and expiry indexes keep entries for leased rows only.

They had an entry for every row (queued, delivered and dead ones too), so every enqueue and
every acknowledgement wrote two index entries that no query reads: the renewal looks a
worker's leases up by owner and the reaper the expired ones by expiry, both among leased rows
only. On a large table building them reads it once (the writes wait meanwhile).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_LEASED = sa.text("state = 'leased'")


def upgrade() -> None:
    op.drop_index("ix_notifications_lease_owner", "notifications")
    op.drop_index("ix_notifications_state_lease_expires_at", "notifications")
    for name, column in (("owner", "lease_owner"), ("expiry", "lease_expires_at")):
        op.create_index(
            f"ix_notifications_leased_{name}",
            "notifications",
            [column],
            sqlite_where=_LEASED,
            postgresql_where=_LEASED,
        )


def downgrade() -> None:
    op.drop_index("ix_notifications_leased_expiry", "notifications")
    op.drop_index("ix_notifications_leased_owner", "notifications")
    op.create_index("ix_notifications_lease_owner", "notifications", ["lease_owner"])
    op.create_index(
        "ix_notifications_state_lease_expires_at", "notifications", ["state", "lease_expires_at"]
    )
