"""The HTTP front door: idempotent requests, and each tenant's request limit and queue cap.

- ``api_requests``: one row per ``Idempotency-Key`` a tenant's HTTP callers used: the
  fingerprint of the request's body, while it is in flight its owner's token and lease, then
  the status and body of its answer (replayed to a repeat). A row outlives its lease only when
  its server died mid-request; a later repeat takes it over. Retention deletes a row once its
  first notification is gone, so a key is remembered as long as its notification is kept.
- ``tenants.api_rate_per_s``, ``tenants.api_burst``: requests per second each of the tenant's
  API keys may make (NULL: the default); ``tenants.max_queued``: how many notifications the
  tenant may hold queued before the API refuses more (NULL: the default).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_requests",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("idem_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(32), nullable=True),
        sa.Column("locked_until", sa.Double, nullable=True),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("notification_id", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_requests"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_api_requests_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("tenant_id", "idem_key", name="uq_api_requests_tenant_id_idem_key"),
    )
    op.create_index("ix_api_requests_created_at", "api_requests", ["created_at"])
    op.add_column("tenants", sa.Column("api_rate_per_s", sa.Double, nullable=True))
    op.add_column("tenants", sa.Column("api_burst", sa.Double, nullable=True))
    op.add_column("tenants", sa.Column("max_queued", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("max_queued")
        batch.drop_column("api_burst")
        batch.drop_column("api_rate_per_s")
    op.drop_index("ix_api_requests_created_at", table_name="api_requests")
    op.drop_table("api_requests")
