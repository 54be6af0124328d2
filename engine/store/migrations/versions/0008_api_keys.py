"""Tenant API keys: who may call OmniPost over HTTP on a tenant's behalf.

A key is shown once, when it is made; the store keeps its public prefix (to find it, and to
name it in listings) and the SHA-256 of the whole key (the key is 256 random bits, so a slow
hash buys nothing), never the key. A revoked key keeps its row (its name and dates stay in
listings and the audit log), marked by ``revoked_at``.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("name", sa.String(100), nullable=False, server_default=""),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("last_used_at", sa.Double, nullable=True),
        sa.Column("revoked_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_api_keys_tenant_id_tenants",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("prefix", name="uq_api_keys_prefix"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_tenant_id", table_name="api_keys")
    op.drop_table("api_keys")
