"""Each tenant's suppression list: recipients a provider said are gone for good.

- ``suppressions``: per tenant and provider, the keyed digest of a recipient (``SecretBox.digest``,
  looked up on every enqueue), the recipient itself encrypted, why (the provider's answer or an
  operator's note), who put it there (``provider`` or ``operator``), the notification whose answer
  did, and when. Retention deletes rows older than its window for them.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "suppressions",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("recipient", sa.Text, nullable=False),
        sa.Column("reason", sa.String(500), nullable=False, server_default=""),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("notification_id", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_suppressions"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_suppressions_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"],
            ["providers.id"],
            name="fk_suppressions_provider_id_providers",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "tenant_id",
            "digest",
            "provider_id",
            name="uq_suppressions_tenant_id_digest_provider_id",
        ),
    )
    op.create_index("ix_suppressions_created_at", "suppressions", ["created_at"])
    op.create_index("ix_suppressions_tenant_id_id", "suppressions", ["tenant_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_suppressions_tenant_id_id", table_name="suppressions")
    op.drop_index("ix_suppressions_created_at", table_name="suppressions")
    op.drop_table("suppressions")
