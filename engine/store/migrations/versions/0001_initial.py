"""The initial schema: tenants, providers, limits, notifications, logs, workers.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("rate_per_s", sa.Double, nullable=True),
        sa.Column("burst", sa.Double, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
    )
    op.create_table(
        "providers",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("rate_per_s", sa.Double, nullable=True),
        sa.Column("burst", sa.Double, nullable=True),
        sa.Column("options", sa.Text, nullable=False, server_default="{}"),
        sa.Column("secrets", sa.Text, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_providers"),
        sa.UniqueConstraint("name", name="uq_providers_name"),
    )
    op.create_table(
        "rate_limits",
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("rate_per_s", sa.Double, nullable=False),
        sa.Column("burst", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "provider_id", name="pk_rate_limits"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_rate_limits_tenant_id_tenants"
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"], ["providers.id"], name="fk_rate_limits_provider_id_providers"
        ),
    )
    _create_notifications()
    _create_logs()


def _create_notifications() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("recipient", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("available_at", sa.Double, nullable=False),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("lease_expires_at", sa.Double, nullable=True),
        sa.Column("enqueued_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
        sa.UniqueConstraint(
            "tenant_id", "idempotency_key", name="uq_notifications_tenant_id_idempotency_key"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_notifications_tenant_id_tenants"
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"], ["providers.id"], name="fk_notifications_provider_id_providers"
        ),
    )
    op.create_index(
        "ix_notifications_state_tenant_id_provider_id_priority_id",
        "notifications",
        ["state", "tenant_id", "provider_id", "priority", "id"],
    )
    op.create_index(
        "ix_notifications_state_available_at", "notifications", ["state", "available_at"]
    )
    op.create_index("ix_notifications_lease_owner", "notifications", ["lease_owner"])
    op.create_index(
        "ix_notifications_state_lease_expires_at", "notifications", ["state", "lease_expires_at"]
    )


def _create_logs() -> None:
    op.create_table(
        "delivery_log",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("notification_id", sa.BigInteger, nullable=False),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("worker", sa.String(100), nullable=False),
        sa.Column("ts", sa.Double, nullable=False),
        sa.Column("latency_s", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_delivery_log"),
    )
    op.create_index("ix_delivery_log_tenant_id_ts", "delivery_log", ["tenant_id", "ts"])
    op.create_index("ix_delivery_log_notification_id", "delivery_log", ["notification_id"])
    op.create_table(
        "workers",
        sa.Column("id", sa.String(100), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("heartbeat_at", sa.Double, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("delivered", sa.BigInteger, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_workers"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Double, nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.Integer, nullable=True),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_ts", "audit_log", ["ts"])


def downgrade() -> None:
    for table in ("audit_log", "workers", "delivery_log", "notifications", "rate_limits"):
        op.drop_table(table)
    op.drop_table("providers")
    op.drop_table("tenants")
