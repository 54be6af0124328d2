"""The claim and the acknowledgement of deliveries on Postgres, each one statement.

Through SQLAlchemy a claim is three round trips (``BEGIN``, the statement, ``COMMIT``) and an
acknowledgement four (the grouped update, the delivery-log rows as an ``executemany``), and
SQLAlchemy renders each batch's expanding ``IN`` lists anew. Here each is a single statement
on the asyncpg connection, outside any explicit transaction, so Postgres runs it as a
transaction of its own: the claim picks, locks and leases its rows in one ``UPDATE``; the
acknowledgement updates the leases that still hold and inserts their delivery-log rows in one
statement (a data-modifying CTE), with every batch's values passed as arrays, so the text never
changes and asyncpg's prepared statement serves every batch. ``Database.write_on_driver`` runs
them. The statements are the store's own (``QueueRepo.claim`` and ``_apply_delivered`` say
why each clause is there); the contract tests run both stores through them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.domain import NotificationState
from engine.store.records import Completion

__all__ = ["CLAIM_SQL", "DELIVER_SQL", "claim", "deliver"]

_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_DELIVERED = NotificationState.DELIVERED.value

# The picked rows are locked in a materialized CTE: as a plain IN (subquery) the planner may
# run the subquery again per outer row, each run skipping the rows already changed, so that
# LIMIT would no longer bound what is claimed (``picked_once`` in database.py).
# The state is a parameter, not a literal: with ``state = 'queued'`` written out, Postgres may
# read the key's due rows along the partial index ``ix_notifications_queued_due`` (queued rows
# only) and sort them all, every claim, where ``ix_notifications_claim`` yields them in claim
# order and stops after ``n`` (measured: a quarter slower over a 50,000 backlog).
CLAIM_SQL = """
WITH picked AS MATERIALIZED (
    SELECT id FROM notifications
    WHERE state = $7 AND tenant_id = $1 AND provider_id = $2 AND available_at <= $3
    ORDER BY priority DESC, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications
SET state = $8, lease_owner = $5, lease_expires_at = $6, attempt = attempt + 1
WHERE id IN (SELECT id FROM picked)
RETURNING id, recipient, payload, idempotency_key, attempt, failures, max_attempts, enqueued_at
"""

DELIVER_SQL = f"""
WITH acked AS (
    UPDATE notifications
    SET state = '{_DELIVERED}', lease_owner = NULL, lease_expires_at = NULL, finished_at = $3
    WHERE id = ANY($1::bigint[])
      AND (id, attempt) IN (SELECT * FROM unnest($1::bigint[], $2::integer[]))
      AND lease_owner = $4 AND state = '{_LEASED}'
    RETURNING id
), logged AS (
    INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt, outcome,
                              detail, worker, ts, latency_s, send_s)
    SELECT l.* FROM unnest($1::bigint[], $5::integer[], $6::integer[], $2::integer[],
                           $7::text[], $8::text[], $9::text[], $10::float8[], $11::float8[],
                           $12::float8[])
        AS l(id, tenant_id, provider_id, attempt, outcome, detail, worker, ts, latency_s, send_s)
    WHERE l.id IN (SELECT id FROM acked)
)
SELECT id FROM acked
"""


async def claim(
    conn: Any,
    tenant_id: int,
    provider_id: int,
    n: int,
    owner: str,
    expires: float,
    now: float,
) -> list[Any]:
    """Lease up to ``n`` due rows of one key to ``owner`` until ``expires``; returns the leased
    rows (id, recipient, payload, idempotency_key, attempt, failures, max_attempts,
    enqueued_at). ``conn``: an asyncpg connection outside any transaction."""
    args = (tenant_id, provider_id, now, n, owner, expires, _QUEUED, _LEASED)
    return list(await conn.fetch(CLAIM_SQL, *args))


async def deliver(conn: Any, completions: Sequence[Completion], worker: str) -> set[int]:
    """Mark ``completions`` (every one delivered, all of one lease owner) delivered where the
    lease still holds (same owner, same attempt, still leased), and write a delivery-log row
    for each of those; returns the ids applied. ``conn``: as ``claim``'s."""
    ordered = sorted(completions, key=lambda c: c.leased.id)
    leases = [c.leased for c in ordered]
    rows = await conn.fetch(
        DELIVER_SQL,
        [item.id for item in leases],
        [item.attempt for item in leases],
        max(c.ts for c in ordered),
        leases[0].owner,
        [item.tenant_id for item in leases],
        [item.provider_id for item in leases],
        [c.outcome.value for c in ordered],
        [c.detail[:500] for c in ordered],
        [worker] * len(ordered),
        [c.ts for c in ordered],
        [c.latency_s for c in ordered],
        [c.send_s for c in ordered],
    )
    return {row[0] for row in rows}
