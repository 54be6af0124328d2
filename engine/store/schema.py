"""Tables. The Alembic migrations in ``engine/store/migrations`` create exactly these; a test
compares the two so they cannot drift."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "audit_log",
    "delivery_log",
    "metadata",
    "notifications",
    "providers",
    "rate_limits",
    "tenants",
    "workers",
]

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

# SQLite only makes an INTEGER PRIMARY KEY an alias of the rowid (and so autoincrementing).
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(63), nullable=False, unique=True),
    sa.Column("rate_per_s", sa.Double, nullable=True),
    sa.Column("burst", sa.Double, nullable=True),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("created_at", sa.Double, nullable=False),
)

providers = sa.Table(
    "providers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(63), nullable=False, unique=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("rate_per_s", sa.Double, nullable=True),
    sa.Column("burst", sa.Double, nullable=True),
    sa.Column("options", sa.Text, nullable=False, server_default="{}"),
    # A Fernet token of the JSON object of secrets; never plaintext.
    sa.Column("secrets", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
)

rate_limits = sa.Table(
    "rate_limits",
    metadata,
    sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), primary_key=True),
    sa.Column("provider_id", sa.Integer, sa.ForeignKey("providers.id"), primary_key=True),
    sa.Column("rate_per_s", sa.Double, nullable=False),
    sa.Column("burst", sa.Double, nullable=False),
)

notifications = sa.Table(
    "notifications",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False),
    sa.Column("provider_id", sa.Integer, sa.ForeignKey("providers.id"), nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),  # Fernet token
    sa.Column("payload", sa.Text, nullable=False),  # JSON
    sa.Column("idempotency_key", sa.String(200), nullable=False),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("state", sa.String(16), nullable=False),
    # Bumped by every claim; a completion must present the attempt it was leased with.
    sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
    # Transient failures so far; counted against max_attempts (throttles are not).
    sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("available_at", sa.Double, nullable=False),
    sa.Column("lease_owner", sa.String(100), nullable=True),
    sa.Column("lease_expires_at", sa.Double, nullable=True),
    sa.Column("enqueued_at", sa.Double, nullable=False),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.UniqueConstraint("tenant_id", "idempotency_key"),
    sa.Index(None, "lease_owner"),
    sa.Index(None, "state", "lease_expires_at"),
)

delivery_log = sa.Table(
    "delivery_log",
    metadata,
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
    sa.Index(None, "tenant_id", "ts"),
    sa.Index(None, "notification_id"),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("heartbeat_at", sa.Double, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("delivered", sa.BigInteger, nullable=False, server_default="0"),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.Double, nullable=False),
    sa.Column("actor", sa.String(100), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("tenant_id", sa.Integer, nullable=True),
    sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
    sa.Index(None, "ts"),
)

# The claim's index: one key's queued rows, highest priority first, then oldest (migration 0002).
sa.Index(
    "ix_notifications_claim",
    notifications.c.state,
    notifications.c.tenant_id,
    notifications.c.provider_id,
    notifications.c.priority.desc(),
    notifications.c.id,
)
