"""Alembic environment: runs on the connection that ``engine.store.migrate`` passes in."""

from __future__ import annotations

from alembic import context

from engine.store.partial_indexes import PARTIAL_INDEXES
from engine.store.schema import metadata

assert PARTIAL_INDEXES  # importing them put them in ``metadata``, which autogenerate compares

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reached by a bare `alembic` command
    raise SystemExit("run migrations with `omnipost migrate`.")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
