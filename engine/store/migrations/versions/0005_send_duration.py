"""The provider's own time per send in the delivery log: what the planner models a real
provider's latency from (``latency_s`` is enqueue to outcome, which includes the wait).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("delivery_log", sa.Column("send_s", sa.Double, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_log") as batch:
        batch.drop_column("send_s")
