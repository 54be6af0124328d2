"""Status events: a tenant's endpoints, and the outbox of events to them.

- ``event_endpoints``: a tenant's URL, the event types it takes (a mask of
  ``engine.core.status_events.EventType.bit``), its signing secret (a SecretBox token; the one
  before a rotation too, until ``old_secret_until``), its own rate and burst, and whether it is
  disabled (when, why).
- ``status_events``: the outbox, one row per (event, endpoint): what happened, leased and retried
  as notifications are (``state``, ``tries``, ``available_at``, ``lease_owner``).
- Triggers write the events in the transaction of the change that causes them, whichever
  statement makes it (a claim that finds a row past its deadline, a cancel, a sweep, an
  outcome): a change to a finished state (``notification.<state>``), a row enqueued scheduled or
  suppressed, and a delivery-log row of a failed attempt (``notification.attempt_failed``, with
  ``retrying`` read from the row's state after it). Only for endpoints of the row's tenant that
  take the type and are enabled; with none, nothing is written. SQLite: row triggers; Postgres:
  statement triggers over the transition tables, one grouped insert per statement (as the queue
  counts' of migration 0003), which return at once while no endpoint exists.
- An event's ``sequence`` orders one notification's events: 0 scheduled, ``2 * attempt`` a
  failed attempt, ``2 * attempt + 1`` a finished state.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# The event types' bits (engine/core/status_events.py), by the state a notification ends in.
_STATE_BITS = {
    "delivered": 1,
    "dead": 4,
    "cancelled": 8,
    "suppressed": 16,
    "expired": 32,
    "scheduled": 64,
}
_ATTEMPT_FAILED_BIT = 2
_FINISHED = ("delivered", "dead", "cancelled", "suppressed", "expired")
_FAILED_OUTCOMES = ("transient", "permanent", "throttled")

_COLUMNS = (
    "endpoint_id, tenant_id, notification_id, provider_id, type, state, occurred_at, sequence,"
    " attempt, max_attempts, retrying, outcome, error, idempotency_key, tries, available_at,"
    " notification_state"
)


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _bit_of(column: str) -> str:
    cases = " ".join(f"WHEN '{state}' THEN {bit}" for state, bit in _STATE_BITS.items())
    return f"(CASE {column} {cases} ELSE 0 END)"


def _state_select(row: str, *, sequence: str, occurred: str, source: str) -> str:
    """The events of a notification row ``row`` now in a finished or scheduled state."""
    return f"""
    SELECT e.id, {row}.tenant_id, {row}.id, {row}.provider_id, 'notification.' || {row}.state,
           'pending', {occurred}, {sequence}, {row}.attempt, {row}.max_attempts, NULL, NULL,
           CASE {row}.state WHEN 'delivered' THEN NULL ELSE {row}.last_error END,
           {row}.idempotency_key, 0, {occurred}, {row}.state
    FROM {source}
    JOIN event_endpoints e ON e.tenant_id = {row}.tenant_id
    WHERE e.disabled_at IS NULL AND (e.events & {_bit_of(f"{row}.state")}) <> 0"""


def _failed_select(log: str, source: str) -> str:
    """The events of a delivery-log row ``log`` of a failed attempt."""
    return f"""
    SELECT e.id, {log}.tenant_id, {log}.notification_id, {log}.provider_id,
           'notification.attempt_failed', 'pending', {log}.ts, 2 * {log}.attempt, {log}.attempt,
           n.max_attempts, n.state = 'queued', {log}.outcome, {log}.detail, n.idempotency_key,
           0, {log}.ts, n.state
    FROM {source}
    JOIN notifications n ON n.id = {log}.notification_id
    JOIN event_endpoints e ON e.tenant_id = {log}.tenant_id
    WHERE e.disabled_at IS NULL AND (e.events & {_ATTEMPT_FAILED_BIT}) <> 0"""


def _sqlite_triggers() -> list[str]:
    finished, failed = _listed(_FINISHED), _listed(_FAILED_OUTCOMES)
    update = _state_select(
        "NEW",
        sequence="2 * NEW.attempt + 1",
        occurred="COALESCE(NEW.finished_at, NEW.available_at)",
        source="(SELECT 1)",
    )
    insert = _state_select(
        "NEW",
        sequence="CASE NEW.state WHEN 'scheduled' THEN 0 ELSE 1 END",
        occurred="COALESCE(NEW.finished_at, NEW.enqueued_at)",
        source="(SELECT 1)",
    )
    return [
        f"""CREATE TRIGGER tr_notifications_events_update AFTER UPDATE OF state ON notifications
        WHEN OLD.state IS NOT NEW.state AND NEW.state IN ({finished})
        BEGIN INSERT INTO status_events ({_COLUMNS}) {update}; END""",
        f"""CREATE TRIGGER tr_notifications_events_insert AFTER INSERT ON notifications
        WHEN NEW.state IN ('scheduled', 'suppressed')
        BEGIN INSERT INTO status_events ({_COLUMNS}) {insert}; END""",
        f"""CREATE TRIGGER tr_delivery_log_events_insert AFTER INSERT ON delivery_log
        WHEN NEW.outcome IN ({failed})
        BEGIN INSERT INTO status_events ({_COLUMNS}) {_failed_select("NEW", "(SELECT 1)")}; END""",
    ]


_PG_GUARD = "IF NOT EXISTS (SELECT 1 FROM event_endpoints) THEN RETURN NULL; END IF;"


def _postgres_triggers() -> list[str]:
    finished, failed = _listed(_FINISHED), _listed(_FAILED_OUTCOMES)
    update = (
        _state_select(
            "n",
            sequence="2 * n.attempt + 1",
            occurred="COALESCE(n.finished_at, n.available_at)",
            source="new_rows n JOIN old_rows o ON o.id = n.id",
        )
        + f" AND n.state <> o.state AND n.state IN ({finished}) ORDER BY n.id"
    )
    insert = (
        _state_select(
            "n",
            sequence="CASE n.state WHEN 'scheduled' THEN 0 ELSE 1 END",
            occurred="COALESCE(n.finished_at, n.enqueued_at)",
            source="new_rows n",
        )
        + " AND n.state IN ('scheduled', 'suppressed') ORDER BY n.id"
    )
    logged = _failed_select("l", "new_rows l") + f" AND l.outcome IN ({failed}) ORDER BY l.id"
    bodies = {
        ("notifications", "update"): update,
        ("notifications", "insert"): insert,
        ("delivery_log", "insert"): logged,
    }
    statements = []
    for (table, event), select in bodies.items():
        name = f"omnipost_{table}_events_{event}"
        referencing = (
            "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
            if event == "update"
            else "REFERENCING NEW TABLE AS new_rows"
        )
        statements.append(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {_PG_GUARD}"
            f" INSERT INTO status_events ({_COLUMNS}) {select}; RETURN NULL; END $$"
        )
        statements.append(
            f"CREATE TRIGGER tr_{table}_events_{event} AFTER {event.upper()} ON {table}"
            f" {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
        )
    return statements


_TRIGGERS = (
    ("tr_notifications_events_update", "notifications"),
    ("tr_notifications_events_insert", "notifications"),
    ("tr_delivery_log_events_insert", "delivery_log"),
)


def upgrade() -> None:
    op.create_table(
        "event_endpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("events", sa.Integer, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("old_secret", sa.Text, nullable=True),
        sa.Column("old_secret_until", sa.Double, nullable=True),
        sa.Column("allow_private", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("rate_per_s", sa.Double, nullable=True),
        sa.Column("burst", sa.Double, nullable=True),
        sa.Column("disabled_at", sa.Double, nullable=True),
        sa.Column("disabled_reason", sa.Text, nullable=True),
        sa.Column("failing_since", sa.Double, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_event_endpoints_tenant_id_tenants"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_event_endpoints"),
    )
    op.create_index("ix_event_endpoints_tenant_id", "event_endpoints", ["tenant_id"])
    op.create_table(
        "status_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("endpoint_id", sa.Integer, nullable=False),
        sa.Column("tenant_id", sa.Integer, nullable=False),
        sa.Column("notification_id", sa.BigInteger, nullable=True),
        sa.Column("provider_id", sa.Integer, nullable=True),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
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
        sa.Column("notification_state", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_status_events"),
        sqlite_autoincrement=True,
    )
    pending, leased = sa.text("state = 'pending'"), sa.text("state = 'leased'")
    op.create_index(
        "ix_status_events_due",
        "status_events",
        ["available_at"],
        sqlite_where=pending,
        postgresql_where=pending,
    )
    op.create_index(
        "ix_status_events_lease",
        "status_events",
        ["lease_expires_at"],
        sqlite_where=leased,
        postgresql_where=leased,
    )
    undelivered = sa.text("state <> 'delivered'")
    op.create_index(
        "ix_status_events_undelivered",
        "status_events",
        ["endpoint_id", "state", "occurred_at"],
        sqlite_where=undelivered,
        postgresql_where=undelivered,
    )
    op.create_index(
        "ix_status_events_tenant_id_occurred_at", "status_events", ["tenant_id", "occurred_at"]
    )
    finished = sa.text("finished_at IS NOT NULL")
    op.create_index(
        "ix_status_events_finished",
        "status_events",
        ["finished_at"],
        sqlite_where=finished,
        postgresql_where=finished,
    )
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in _sqlite_triggers() if sqlite else _postgres_triggers():
        op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for trigger, table in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}" + ("" if sqlite else f" ON {table}"))
    if not sqlite:
        for trigger, _ in _TRIGGERS:
            op.execute(f"DROP FUNCTION omnipost_{trigger.removeprefix('tr_')}()")
    op.drop_table("status_events")
    op.drop_index("ix_event_endpoints_tenant_id", "event_endpoints")
    op.drop_table("event_endpoints")
