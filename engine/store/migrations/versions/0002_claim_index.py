"""One index that serves the claim exactly: (state, tenant, provider, priority DESC, id).

The claim asks for one key's queued rows by priority (highest first), then id. The old index
had priority ascending, which Postgres cannot walk for ``priority DESC, id``, and SQLite
preferred the (state, available_at) index, so both sorted the whole backlog on every claim.
The (state, available_at) index served nothing else and goes.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_notifications_state_tenant_id_provider_id_priority_id", "notifications")
    op.drop_index("ix_notifications_state_available_at", "notifications")
    op.create_index(
        "ix_notifications_claim",
        "notifications",
        ["state", "tenant_id", "provider_id", sa.text("priority DESC"), "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_claim", "notifications")
    op.create_index(
        "ix_notifications_state_available_at", "notifications", ["state", "available_at"]
    )
    op.create_index(
        "ix_notifications_state_tenant_id_provider_id_priority_id",
        "notifications",
        ["state", "tenant_id", "provider_id", "priority", "id"],
    )
