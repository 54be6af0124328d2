"""Provider health: one row per provider whose circuit breaker ever opened.

Every process reads it to skip a provider that is down and to learn when its next probe is
due; the probe's owner and lease expiry make sure only one worker of all probes at a time,
and that a probe owner that died does not leave the circuit stuck half-open.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_health",
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.Double, nullable=True),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("next_probe_at", sa.Double, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("trips", sa.Integer, nullable=False, server_default="0"),
        sa.Column("probe_owner", sa.String(100), nullable=True),
        sa.Column("probe_expires_at", sa.Double, nullable=True),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("provider_id", name="pk_provider_health"),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name="fk_provider_health_provider_id_providers",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("provider_health")
