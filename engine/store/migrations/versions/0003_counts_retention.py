"""Months of operation: counts kept by triggers, bounded indexes, retention settings.

- ``queue_counts``: rows per (tenant, provider, state), kept by triggers on ``notifications``
  in the same transaction as every insert, state change and delete, so they are never wrong
  after a crash. Filled here from a recount, after the triggers exist (on Postgres creating
  them locks out writers until this migration commits, so nothing is counted twice or missed).
- Indexes that keep reads bounded: queued rows per key by due time (due keys), a tenant's
  rows per state in id order (listings, oldest queued), finished rows by age (retention), the
  delivery log by time (retention, recent outcomes) and per tenant in id order (newest first).
- ``settings`` (retention windows) and ``chore_leases`` (one pruner among many engines).
- SQLite: ``notifications``, ``delivery_log`` and ``audit_log`` are rebuilt once with
  ``AUTOINCREMENT`` ids. Without it SQLite hands out the highest id again once pruning has
  deleted it, and a kept log row (or a receiver) would then name the wrong notification.
  A later migration that rebuilds ``notifications`` (Alembic's batch mode) must create the
  count triggers again.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_QUEUED = sa.text("state = 'queued'")
_FINISHED = sa.text("finished_at IS NOT NULL")

_SQLITE_TRIGGERS = [
    """
    CREATE TRIGGER tr_notifications_count_insert AFTER INSERT ON notifications
    BEGIN
        INSERT INTO queue_counts (tenant_id, provider_id, state, shard, n)
        VALUES (NEW.tenant_id, NEW.provider_id, NEW.state, 0, 1)
        ON CONFLICT (tenant_id, provider_id, state, shard) DO UPDATE SET n = n + 1;
    END
    """,
    """
    CREATE TRIGGER tr_notifications_count_update AFTER UPDATE OF state ON notifications
    WHEN OLD.state IS NOT NEW.state
    BEGIN
        UPDATE queue_counts SET n = n - 1
        WHERE tenant_id = OLD.tenant_id AND provider_id = OLD.provider_id
          AND state = OLD.state AND shard = 0;
        INSERT INTO queue_counts (tenant_id, provider_id, state, shard, n)
        VALUES (NEW.tenant_id, NEW.provider_id, NEW.state, 0, 1)
        ON CONFLICT (tenant_id, provider_id, state, shard) DO UPDATE SET n = n + 1;
    END
    """,
    """
    CREATE TRIGGER tr_notifications_count_delete AFTER DELETE ON notifications
    BEGIN
        UPDATE queue_counts SET n = n - 1
        WHERE tenant_id = OLD.tenant_id AND provider_id = OLD.provider_id
          AND state = OLD.state AND shard = 0;
    END
    """,
]

# Statement-level triggers with transition tables: one grouped upsert per statement, however
# many rows it changed. Rows are added in key order so that two writers sharing a shard take
# the counter rows' locks in the same order.
_PG_UPSERT = """
    INSERT INTO queue_counts (tenant_id, provider_id, state, shard, n)
    SELECT tenant_id, provider_id, state, pg_backend_pid() % 16, sum(d)
    FROM ({rows}) AS changed
    GROUP BY tenant_id, provider_id, state
    HAVING sum(d) <> 0
    ORDER BY tenant_id, provider_id, state
    ON CONFLICT (tenant_id, provider_id, state, shard)
    DO UPDATE SET n = queue_counts.n + EXCLUDED.n;
"""
_NEW = "SELECT tenant_id, provider_id, state, 1 AS d FROM new_rows"
_OLD = "SELECT tenant_id, provider_id, state, -1 AS d FROM old_rows"
_PG_FUNCTIONS = {
    "insert": _PG_UPSERT.format(rows=_NEW),
    "update": _PG_UPSERT.format(rows=f"{_NEW} UNION ALL {_OLD}"),
    "delete": _PG_UPSERT.format(rows=_OLD),
}
_PG_REFERENCING = {
    "insert": "REFERENCING NEW TABLE AS new_rows",
    "update": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "delete": "REFERENCING OLD TABLE AS old_rows",
}


def _postgres_triggers() -> list[str]:
    statements = []
    for event, body in _PG_FUNCTIONS.items():
        statements.append(
            f"CREATE FUNCTION omnipost_count_{event}() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN {body} RETURN NULL; END $$"
        )
        statements.append(
            f"CREATE TRIGGER tr_notifications_count_{event} AFTER {event.upper()} ON notifications"
            f" {_PG_REFERENCING[event]} FOR EACH STATEMENT"
            f" EXECUTE FUNCTION omnipost_count_{event}()"
        )
    return statements


_REBUILT = ("notifications", "delivery_log", "audit_log")


def _with_autoincrement(create: str, table: str) -> str:
    """The table's CREATE statement (as migration 0001 made it) with its ``id`` made
    ``PRIMARY KEY AUTOINCREMENT`` under a temporary name."""
    column = re.compile(r"\bid INTEGER NOT NULL,")
    constraint = re.compile(r",\s*CONSTRAINT pk_\w+ PRIMARY KEY \(id\)")
    if not column.search(create) or not constraint.search(create):
        raise RuntimeError(f"the {table} table is not as migration 0002 left it; not rebuilt.")
    rebuilt = constraint.sub(
        "", column.sub("id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", create, 1)
    )
    return re.sub(r"^CREATE TABLE \"?\w+\"?", f"CREATE TABLE {table}_rebuilt", rebuilt, count=1)


def _rebuild_with_autoincrement(table: str) -> None:
    bind = op.get_bind()
    master = "SELECT sql FROM sqlite_master WHERE tbl_name = :t AND type = :k AND sql IS NOT NULL"
    create = bind.execute(sa.text(master), {"t": table, "k": "table"}).scalar_one()
    indexes = list(bind.execute(sa.text(master), {"t": table, "k": "index"}).scalars())
    op.execute(_with_autoincrement(create, table))
    op.execute(f"INSERT INTO {table}_rebuilt SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {table}_rebuilt RENAME TO {table}")
    for index in indexes:
        op.execute(index)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in _REBUILT:
            _rebuild_with_autoincrement(table)
    op.create_table(
        "queue_counts",
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("provider_id", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("shard", sa.Integer, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "provider_id", "state", "shard", name="pk_queue_counts"
        ),
    )
    op.create_table(
        "settings",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_settings"),
    )
    op.create_table(
        "chore_leases",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("last_run_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_chore_leases"),
    )
    op.create_index(
        "ix_notifications_queued_due",
        "notifications",
        ["tenant_id", "provider_id", "available_at"],
        sqlite_where=_QUEUED,
        postgresql_where=_QUEUED,
    )
    op.create_index("ix_notifications_tenant_state", "notifications", ["tenant_id", "state", "id"])
    op.create_index(
        "ix_notifications_finished",
        "notifications",
        ["state", "finished_at"],
        sqlite_where=_FINISHED,
        postgresql_where=_FINISHED,
    )
    op.create_index("ix_delivery_log_ts", "delivery_log", ["ts"])
    op.drop_index("ix_delivery_log_tenant_id_ts", "delivery_log")
    op.create_index("ix_delivery_log_tenant_id_id", "delivery_log", ["tenant_id", "id"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in _SQLITE_TRIGGERS if sqlite else _postgres_triggers():
        op.execute(statement)
    op.execute(
        "INSERT INTO queue_counts (tenant_id, provider_id, state, shard, n)"
        " SELECT tenant_id, provider_id, state, 0, count(*) FROM notifications"
        " GROUP BY tenant_id, provider_id, state"
    )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for event in ("insert", "update", "delete"):
        trigger = f"tr_notifications_count_{event}"
        op.execute(f"DROP TRIGGER {trigger}" + ("" if sqlite else " ON notifications"))
        if not sqlite:
            op.execute(f"DROP FUNCTION omnipost_count_{event}()")
    op.drop_index("ix_delivery_log_tenant_id_id", "delivery_log")
    op.create_index("ix_delivery_log_tenant_id_ts", "delivery_log", ["tenant_id", "ts"])
    op.drop_index("ix_delivery_log_ts", "delivery_log")
    op.drop_index("ix_notifications_finished", "notifications")
    op.drop_index("ix_notifications_tenant_state", "notifications")
    op.drop_index("ix_notifications_queued_due", "notifications")
    op.drop_table("chore_leases")
    op.drop_table("settings")
    op.drop_table("queue_counts")
