"""Tables. The Alembic migrations in ``engine/store/migrations`` create exactly these; a test
compares the two so they cannot drift."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "api_keys",
    "api_requests",
    "audit_log",
    "chore_leases",
    "delivery_log",
    "event_endpoints",
    "metadata",
    "notifications",
    "provider_health",
    "providers",
    "queue_counts",
    "rate_limits",
    "settings",
    "status_events",
    "suppressions",
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
    # The HTTP API (migration 0009): each key's requests per second, and the most the tenant
    # may hold queued; NULL takes the server's default.
    sa.Column("api_rate_per_s", sa.Double, nullable=True),
    sa.Column("api_burst", sa.Double, nullable=True),
    sa.Column("max_queued", sa.BigInteger, nullable=True),
    # Migration 0011: the deadline given to its notifications that name none (seconds after
    # their send time); NULL: the provider's, if it has one, else none.
    sa.Column("default_ttl_s", sa.Double, nullable=True),
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
    # A SecretBox token of the JSON object of secrets; never plaintext.
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
    sa.Column("recipient", sa.Text, nullable=False),  # SecretBox token (engine/core/crypto.py)
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
    # Migration 0011: never sent after this (unix s); NULL: no deadline.
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.UniqueConstraint("tenant_id", "idempotency_key"),
    # SQLite would otherwise reuse the highest id once retention deleted it (migration 0003).
    sqlite_autoincrement=True,
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
    sa.Column("send_s", sa.Double, nullable=True),  # the provider's own time (migration 0005)
    sa.Index(None, "notification_id"),
    sqlite_autoincrement=True,
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
    sqlite_autoincrement=True,
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

# A tenant's rows of one state in id order: the queue and dead-letter listings, and the age of
# its oldest queued notification (ids grow with enqueue time: the first entry is the oldest).
sa.Index(
    "ix_notifications_tenant_state",
    notifications.c.tenant_id,
    notifications.c.state,
    notifications.c.id,
)
# The partial indexes (migrations 0003 and 0006) are declared in ``engine.store.partial_indexes``,
# which adds them to ``metadata`` where DDL is made or compared (the migrations and their test):
# declaring a Postgres partial index imports SQLAlchemy's Postgres dialect, which would cost every
# command on SQLite 20 ms of its start. Queries name them in raw SQL, never through ``metadata``.
# Retention of the delivery log, and the recent outcomes `omnipost stats` counts.
sa.Index("ix_delivery_log_ts", delivery_log.c.ts)
# A tenant's newest deliveries (the console's log), newest id first (was (tenant_id, ts), which
# made SQLite sort every row of the tenant by id).
sa.Index("ix_delivery_log_tenant_id_id", delivery_log.c.tenant_id, delivery_log.c.id)

# Rows per (tenant, provider, state), kept by triggers on ``notifications`` in the same
# transaction as every change (migration 0003 has them), so that depth, totals and the keys
# with work are read from a table whose size does not grow with the queue or its history.
# A key's count is the sum over its shards: each Postgres connection adds its changes to its
# own shard (pid modulo 16) so that concurrent workers do not queue on one counter row; a
# shard alone may go negative. SQLite has one writer and one shard.
queue_counts = sa.Table(
    "queue_counts",
    metadata,
    sa.Column("tenant_id", sa.Integer, primary_key=True),
    sa.Column("provider_id", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(16), primary_key=True),
    sa.Column("shard", sa.Integer, primary_key=True),
    sa.Column("n", sa.BigInteger, nullable=False),
)

# Store-wide settings every process reads (retention), as JSON values by name.
settings = sa.Table(
    "settings",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

# Named leases on store-wide chores (the pruner), so that of many engines one does each.
chore_leases = sa.Table(
    "chore_leases",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("owner", sa.String(100), nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("last_run_at", sa.Double, nullable=True),
)

# One row per provider whose circuit ever opened (migration 0004): what every process reads to
# skip a provider that is down, and the lease of the one probe that tests it
# (engine/core/circuit.py).
provider_health = sa.Table(
    "provider_health",
    metadata,
    sa.Column(
        "provider_id",
        sa.Integer,
        sa.ForeignKey("providers.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("since", sa.Double, nullable=True),
    sa.Column("last_error", sa.Text, nullable=False, server_default=""),
    sa.Column("next_probe_at", sa.Double, nullable=True),
    sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("trips", sa.Integer, nullable=False, server_default="0"),
    sa.Column("probe_owner", sa.String(100), nullable=True),
    sa.Column("probe_expires_at", sa.Double, nullable=True),
    sa.Column("updated_at", sa.Double, nullable=False),
)

# Tenant API keys (migration 0008): the public prefix and the SHA-256 of the key, never the
# key; a revoked key keeps its row.
api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("prefix", sa.String(32), nullable=False, unique=True),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("name", sa.String(100), nullable=False, server_default=""),
    sa.Column("scope", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("last_used_at", sa.Double, nullable=True),
    sa.Column("revoked_at", sa.Double, nullable=True),
    sa.Index("ix_api_keys_tenant_id", "tenant_id"),
)

# Idempotent HTTP requests (migration 0009): per tenant and ``Idempotency-Key``, the body's
# fingerprint, the owner and lease while in flight, then the answer to replay.
api_requests = sa.Table(
    "api_requests",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("idem_key", sa.String(255), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("owner", sa.String(32), nullable=True),
    sa.Column("locked_until", sa.Double, nullable=True),
    sa.Column("status", sa.Integer, nullable=True),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("notification_id", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.UniqueConstraint("tenant_id", "idem_key"),
    sa.Index("ix_api_requests_created_at", "created_at"),
)

# Each tenant's suppression list (migration 0010): recipients a provider said are gone for good
# (or an operator added), per provider. ``digest`` is ``SecretBox.digest`` of the recipient (a
# keyed BLAKE2b: looked up on every enqueue without the recipient in the clear); ``recipient`` is a
# SecretBox token, for listing them masked and recomputing digests when the keys rotate.
suppressions = sa.Table(
    "suppressions",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column(
        "provider_id",
        sa.Integer,
        sa.ForeignKey("providers.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),
    sa.Column("reason", sa.String(500), nullable=False, server_default=""),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("notification_id", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    # Enqueue looks a tenant's digests up, then checks the provider.
    sa.UniqueConstraint("tenant_id", "digest", "provider_id"),
    sa.Index("ix_suppressions_created_at", "created_at"),
    # A tenant's list, newest first, a page at a time, whatever the other tenants' lists hold.
    sa.Index("ix_suppressions_tenant_id_id", "tenant_id", "id"),
)

# Migration 0012: a tenant's endpoints for status events, and the outbox of events to them
# (``engine/store/status_events.py``; triggers write the events, the migration says which).
event_endpoints = sa.Table(
    "event_endpoints",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("events", sa.Integer, nullable=False),  # a mask of EventType.bit
    sa.Column("secret", sa.Text, nullable=False),  # SecretBox token
    sa.Column("old_secret", sa.Text, nullable=True),  # the one before a rotation, until:
    sa.Column("old_secret_until", sa.Double, nullable=True),
    sa.Column("allow_private", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("rate_per_s", sa.Double, nullable=True),
    sa.Column("burst", sa.Double, nullable=True),
    sa.Column("disabled_at", sa.Double, nullable=True),
    sa.Column("disabled_reason", sa.Text, nullable=True),
    sa.Column("failing_since", sa.Double, nullable=True),  # every try failed since then
    sa.Column("created_at", sa.Double, nullable=False),
)

status_events = sa.Table(
    "status_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("endpoint_id", sa.Integer, nullable=False),
    sa.Column("tenant_id", sa.Integer, nullable=False),
    sa.Column("notification_id", sa.BigInteger, nullable=True),
    sa.Column("provider_id", sa.Integer, nullable=True),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # pending, leased, delivered, failed
    sa.Column("occurred_at", sa.Double, nullable=False),
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=True),
    sa.Column("max_attempts", sa.Integer, nullable=True),
    sa.Column("retrying", sa.Boolean, nullable=True),
    sa.Column("outcome", sa.String(16), nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("idempotency_key", sa.String(200), nullable=True),
    sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("available_at", sa.Double, nullable=False),
    sa.Column("lease_owner", sa.String(100), nullable=True),
    sa.Column("lease_expires_at", sa.Double, nullable=True),
    sa.Column("last_status", sa.Integer, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Column("notification_state", sa.String(16), nullable=True),  # after the change
    # By tenant and time: its listing, its replay, an endpoint's removal (the tenant's rows).
    sa.Index(None, "tenant_id", "occurred_at"),
    sqlite_autoincrement=True,
)
