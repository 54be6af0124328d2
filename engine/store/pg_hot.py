"""The enqueue, the claim and the acknowledgement of deliveries on Postgres, each one statement.

Through SQLAlchemy a claim is three round trips (``BEGIN``, the statement, ``COMMIT``) and an
acknowledgement four (the grouped update, the delivery-log rows as an ``executemany``), and
SQLAlchemy renders each batch's expanding ``IN`` lists anew. Here each is a single statement
on the asyncpg connection, outside any explicit transaction, so Postgres runs it as a
transaction of its own: the claim picks, locks and leases its rows in one ``UPDATE``; the
acknowledgement updates the leases that still hold and inserts their delivery-log rows in one
statement (a data-modifying CTE), with every batch's values passed as arrays, so the text never
changes and asyncpg's prepared statement serves every batch. ``Database.write_on_driver`` runs
them. The statements are the store's own (``QueueRepo.claim`` and
``completions.apply_delivered`` say why each clause is there); the contract tests run both
stores through them.

An enqueue through SQLAlchemy is four round trips (``BEGIN``, a multi-row ``INSERT`` whose
parameters it processes row by row, the ``NOTIFY``, ``COMMIT``); here the rows go as arrays
and one statement inserts them, looks up the keys the tenant used before, and notifies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from engine.core.domain import EXPIRED_DETAIL, NotificationState, Outcome
from engine.store.records import Completion, NotificationRow
from engine.store.suppressions import SUPPRESSED, SUPPRESSED_DETAIL

__all__ = [
    "CLAIM_MANY_SQL",
    "CLAIM_SQL",
    "DELIVER_SQL",
    "KEYS_SQL",
    "claim",
    "claim_many",
    "deliver",
    "enqueue",
    "enqueue_sql",
]

_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_DELIVERED = NotificationState.DELIVERED.value
_SCHEDULED = NotificationState.SCHEDULED.value
_EXPIRED = NotificationState.EXPIRED.value
_EXPIRED_WHY = EXPIRED_DETAIL.replace("'", "''")
_DELIVERED_OUTCOME = Outcome.DELIVERED.value
_UNIQUE_VIOLATION = "23505"  # SQLSTATE unique_violation

# The picked rows are locked in a materialized CTE: as a plain IN (subquery) the planner may
# run the subquery again per outer row, each run skipping the rows already changed, so that
# LIMIT would no longer bound what is claimed (``picked_once`` in database.py).
# The state is a parameter, not a literal: with ``state = 'queued'`` written out, Postgres may
# read the key's due rows along the partial index ``ix_notifications_queued_due`` (queued rows
# only) and sort them all, every claim, where ``ix_notifications_claim`` yields them in claim
# order and stops after ``n`` (measured: a quarter slower over a 50,000 backlog).
CLAIM_SQL = f"""
WITH picked AS MATERIALIZED (
    SELECT id FROM notifications
    WHERE state = $7 AND tenant_id = $1 AND provider_id = $2 AND available_at <= $3
    ORDER BY priority DESC, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications
SET state = CASE WHEN expires_at <= $3::float8 THEN '{_EXPIRED}' ELSE $8::text END,
    lease_owner = CASE WHEN expires_at <= $3::float8 THEN NULL ELSE $5::text END,
    lease_expires_at = CASE WHEN expires_at <= $3::float8 THEN NULL ELSE $6::float8 END,
    finished_at = CASE WHEN expires_at <= $3::float8 THEN $3::float8 ELSE finished_at END,
    last_error = CASE WHEN expires_at <= $3::float8 THEN '{_EXPIRED_WHY}' ELSE last_error END,
    attempt = attempt + 1
WHERE id IN (SELECT id FROM picked)
RETURNING id, recipient, payload, idempotency_key, attempt, failures, max_attempts, enqueued_at,
    expires_at, available_at
"""

# ``CLAIM_SQL`` for many keys in one statement: each (tenant, provider, n) picks its rows in a
# LATERAL subquery, locked and skipped as the single claim does; one trip, however many keys.
CLAIM_MANY_SQL = f"""
WITH picked AS MATERIALIZED (
    SELECT x.id FROM unnest($1::integer[], $2::integer[], $3::integer[]) AS a(t, p, n)
    CROSS JOIN LATERAL (
        SELECT id FROM notifications
        WHERE state = $7 AND tenant_id = a.t AND provider_id = a.p AND available_at <= $4
        ORDER BY priority DESC, id
        LIMIT a.n
        FOR UPDATE SKIP LOCKED
    ) AS x
)
UPDATE notifications
SET state = CASE WHEN expires_at <= $4::float8 THEN '{_EXPIRED}' ELSE $8::text END,
    lease_owner = CASE WHEN expires_at <= $4::float8 THEN NULL ELSE $5::text END,
    lease_expires_at = CASE WHEN expires_at <= $4::float8 THEN NULL ELSE $6::float8 END,
    finished_at = CASE WHEN expires_at <= $4::float8 THEN $4::float8 ELSE finished_at END,
    last_error = CASE WHEN expires_at <= $4::float8 THEN '{_EXPIRED_WHY}' ELSE last_error END,
    attempt = attempt + 1
WHERE id IN (SELECT id FROM picked)
RETURNING id, recipient, payload, idempotency_key, attempt, failures, max_attempts, enqueued_at,
    expires_at, available_at, tenant_id, provider_id
"""

# The fence on owner and state is written ``IS NOT DISTINCT FROM`` (the same test here: neither
# side is NULL when it holds), which no index serves, so the rows are found by primary key. As
# ``lease_owner = $4 AND state = 'leased'`` the planner could find them through the indexes on
# owner and state, which keep an entry for every row those once matched until a vacuum: that
# acknowledgement read more the more a worker had delivered (tests/engine/store/test_pg_ack.py).
DELIVER_SQL = f"""
WITH acked AS (
    UPDATE notifications
    SET state = '{_DELIVERED}', lease_owner = NULL, lease_expires_at = NULL, finished_at = $3
    WHERE id = ANY($1::bigint[])
      AND (id, attempt) IN (SELECT * FROM unnest($1::bigint[], $2::integer[]))
      AND (lease_owner, state) IS NOT DISTINCT FROM ($4, '{_LEASED}')
    RETURNING id, tenant_id, provider_id, attempt
), logged AS (
    INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt, outcome,
                              detail, worker, ts, latency_s, send_s)
    SELECT a.id, a.tenant_id, a.provider_id, a.attempt, '{_DELIVERED_OUTCOME}', l.detail, $5,
           l.ts, l.latency_s, l.send_s
    FROM unnest($1::bigint[], $6::text[], $7::float8[], $8::float8[], $9::float8[])
        AS l(id, detail, ts, latency_s, send_s)
    JOIN acked AS a ON a.id = l.id
)
SELECT id FROM acked
"""


# The rows as arrays, in the order given; a key the tenant used before (or twice in one call)
# is not inserted again, and ``enqueue`` looks those keys up (``KEYS_SQL``) after. A row whose
# recipient the tenant suppressed for its provider (its digests under every configured key,
# $15 on, against ``suppressions``) is inserted suppressed and finished: one probe of the
# unique (tenant, digest, provider) index a row, in a LATERAL subquery (as an EXISTS in the
# select list, the three CASEs that read it ran it three times a row). ``pg_notify`` runs once
# if anything was inserted to be sent (``told`` is joined for that: a CTE nobody reads is never
# run); a scheduled row (its state, $9, says so) is told as well: workers sweep. With ``same``
# the provider, priority, attempts, due time, state and deadline are one value each ($2, $6-$9,
# $13) for every row, as an API batch's nearly always are: six arrays fewer for asyncpg to
# encode, which asks of every element whether it is a sequence (about 0.7 us a row of the
# server's time). With ``made_up`` every key was made up by ``new_keys`` just now, so none can
# be in the table: a plain INSERT, without ``ON CONFLICT``'s speculative insertion (a check
# of the unique index before each row's insertion and its undo record: about a sixth of the
# statement's time in Postgres, bench/http_api.py); ``enqueue`` runs the checked form if one
# ever is. One text per number of keys (nearly always one or two) and form, each prepared once.
#
# With no keys (``keys=0``) the statement takes no digests and no $14: it is for a tenant
# believed to keep no suppression list (nearly all), and checks that belief in the same
# snapshot, once (``listed``). If the tenant has a list after all it inserts nothing and answers
# one row of NULLs, and ``enqueue`` runs the form with digests. Either way a row is judged
# against the list as the statement's snapshot holds it, as with digests; the server spares
# every row its digests (a keyed BLAKE2b, and a 64-character text for asyncpg to send) and
# Postgres a probe a row.
@functools.lru_cache(maxsize=32)
def enqueue_sql(keys: int, *, same: bool = False, made_up: bool = False) -> str:
    """The enqueue for a store with ``keys`` encryption keys configured (0: for a tenant
    believed to keep no suppression list)."""
    arrays = "".join(f", ${15 + k}::text[]" for k in range(keys))
    names = "".join(f", digest{k}" for k in range(keys))
    if same:
        given = f"""
    SELECT $2::integer AS provider_id, u.recipient, u.payload, u.idempotency_key,
           $6::integer AS priority, $7::integer AS max_attempts, $8::float8 AS available_at,
           $13::float8 AS expires_at, $9::text AS state0,
           u.ord{"".join(f", u.digest{k}" for k in range(keys))}
    FROM unnest($3::text[], $4::text[], $5::text[]{arrays}) WITH ORDINALITY
        AS u(recipient, payload, idempotency_key{names}, ord)"""
    else:
        given = f"""
    SELECT * FROM unnest($2::integer[], $3::text[], $4::text[], $5::text[], $6::integer[],
                         $7::integer[], $8::float8[], $13::float8[], $9::text[]{arrays})
        WITH ORDINALITY
        AS g(provider_id, recipient, payload, idempotency_key, priority, max_attempts,
             available_at, expires_at, state0{names}, ord)"""
    checked = "" if made_up else "ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
    if keys:
        judged = f"""
    SELECT g.*, hit.gone IS NOT NULL AS gone
    FROM given AS g LEFT JOIN LATERAL (
        SELECT true AS gone FROM suppressions AS s
        WHERE s.tenant_id = $1 AND s.digest IN ({", ".join(f"g.digest{k}" for k in range(keys))})
          AND s.provider_id = g.provider_id
        LIMIT 1
    ) AS hit ON true"""
        state = f"CASE WHEN gone THEN '{SUPPRESSED}' ELSE state0 END"
        finished = "CASE WHEN gone THEN $10::float8 END, CASE WHEN gone THEN $14::text END"
        listed, unlisted, answer_listed = "", "", ""
    else:
        judged = "SELECT * FROM given"
        state, finished = "state0", "NULL, NULL"
        listed = """
), listed AS (
    SELECT EXISTS (SELECT 1 FROM suppressions WHERE tenant_id = $1) AS yes"""
        unlisted = "WHERE NOT (SELECT yes FROM listed)"
        answer_listed = "UNION ALL SELECT NULL, NULL, NULL FROM listed WHERE yes"
    return f"""
WITH given AS ({given}
), judged AS ({judged}{listed}
), added AS (
    INSERT INTO notifications (tenant_id, provider_id, recipient, payload, idempotency_key,
                               priority, state, attempt, failures, max_attempts,
                               available_at, enqueued_at, finished_at, last_error, expires_at)
    SELECT $1, provider_id, recipient, payload, idempotency_key, priority, {state}, 0, 0,
           max_attempts, available_at, $10::float8, {finished}, expires_at
    FROM judged {unlisted}
    ORDER BY ord {checked}
    RETURNING id, idempotency_key, state
), told AS (
    SELECT pg_notify($11, $12)::text FROM added WHERE state <> '{SUPPRESSED}' LIMIT 1
)
SELECT added.id, added.idempotency_key, added.state FROM added LEFT JOIN told ON true
{answer_listed}
"""


# One unique-index probe per key, whatever plan a prepared statement settles on (an ``= ANY``
# over the tenant's rows may be planned as a scan of all of them).
KEYS_SQL = """
SELECT n.id, n.idempotency_key FROM unnest($2::text[]) AS k(key)
CROSS JOIN LATERAL (
    SELECT id, idempotency_key FROM notifications
    WHERE tenant_id = $1 AND idempotency_key = k.key
) AS n
"""


async def enqueue(
    conn: Any,
    tenant_id: int,
    items: Sequence[NotificationRow],
    recipients: Sequence[str],
    payloads: Sequence[str],
    digests: Callable[[], Sequence[Sequence[str]]],
    now: float,
    notify: tuple[str, str],
    *,
    made_up: bool = False,
    listed: set[int],
) -> tuple[dict[str, int], set[str], set[str]]:
    """Insert ``items`` (one tenant's, with their ``recipients`` encrypted and their
    ``payloads`` encoded) unless the tenant used their key before, suppressed where the
    recipient's ``digests()`` (per configured key, newest first: every item's) are on the
    tenant's list for the item's provider, and notify ``notify`` (channel, payload) if any was
    inserted; returns the id of every key, the keys inserted now and those of them suppressed.
    ``made_up``: every key was made up for this call (``enqueue_sql`` says what that spares).
    ``listed``: the tenants known to keep a suppression list; the digests are made only for
    them, and a tenant found to keep one is added (``enqueue_sql``'s form with no keys).
    ``conn``: an asyncpg connection outside any transaction."""
    keys = [item.idempotency_key for item in items]
    columns: list[Any] = [
        [item.provider_id for item in items],
        [item.priority for item in items],
        [item.max_attempts for item in items],
        [now if item.available_at is None else item.available_at for item in items],
        [item.expires_at for item in items],
        [_SCHEDULED if item.scheduled else _QUEUED for item in items],
    ]
    n = len(items)
    same = all(column.count(column[0]) == n for column in columns)
    if same:
        columns = [column[0] for column in columns]
    provider_ids, priorities, attempts, due, expires, states = columns
    args: tuple[Any, ...] = (tenant_id, provider_ids, recipients, payloads, keys, priorities)
    args += (attempts, due, states, now, *notify, expires)
    found = None
    if tenant_id not in listed:
        found = await _insert(conn, 0, same, made_up, args)
        if found and found[-1][0] is None:  # the tenant keeps a list after all
            listed.add(tenant_id)
            found = None
    if found is None:
        made = digests()
        found = await _insert(conn, len(made), same, made_up, (*args, SUPPRESSED_DETAIL, *made))
    ids = {key: row_id for row_id, key, _ in found}
    suppressed = {key for _, key, state in found if state == SUPPRESSED}
    fresh = set(ids)
    missing = list(set(keys) - fresh)
    if missing:  # used before, or by another transaction while this one waited on the key
        ids.update({key: row_id for row_id, key in await conn.fetch(KEYS_SQL, tenant_id, missing)})
    return ids, fresh, suppressed


async def _insert(
    conn: Any, keys: int, same: bool, made_up: bool, args: tuple[Any, ...]
) -> list[Any]:
    """``enqueue_sql(keys, ...)``'s rows."""
    try:
        return list(await conn.fetch(enqueue_sql(keys, same=same, made_up=made_up), *args))
    except Exception as exc:
        if not made_up or getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
            raise
    # A made-up key the tenant had (a 1 in 2**74 chance): the statement did nothing, and the
    # checked form decides, as for a key a caller gave.
    return list(await conn.fetch(enqueue_sql(keys, same=same), *args))


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
    rows, and those that expired instead (id, recipient, payload, idempotency_key, attempt,
    failures, max_attempts, enqueued_at, expires_at, available_at). ``conn``: an asyncpg
    connection outside any transaction."""
    args = (tenant_id, provider_id, now, n, owner, expires, _QUEUED, _LEASED)
    return list(await conn.fetch(CLAIM_SQL, *args))


async def claim_many(
    conn: Any, asks: Sequence[tuple[int, int, int]], owner: str, expires: float, now: float
) -> list[list[Any]]:
    """``claim`` for each (tenant, provider, n) of ``asks`` in one statement; returns each
    ask's leased rows (as ``claim``'s), in the order of ``asks``."""
    columns = ([a[0] for a in asks], [a[1] for a in asks], [a[2] for a in asks])
    rows = await conn.fetch(CLAIM_MANY_SQL, *columns, now, owner, expires, _QUEUED, _LEASED)
    by_key: dict[tuple[int, int], list[Any]] = {}
    for row in rows:
        by_key.setdefault((row[10], row[11]), []).append(row[:10])
    return [by_key.get((a[0], a[1]), []) for a in asks]


async def deliver(conn: Any, completions: Sequence[Completion], worker: str) -> set[int]:
    """Mark ``completions`` (every one delivered, all of one lease owner) delivered where the
    lease still holds (same owner, same attempt, still leased), and write a delivery-log row
    for each of those; returns the ids applied. ``conn``: as ``claim``'s."""
    ordered = sorted(completions, key=lambda c: c.leased.id)
    leases = [c.leased for c in ordered]
    # The log row's tenant, provider and attempt are the updated row's own (the same values:
    # the lease held); the worker and the outcome are one for the batch. Fewer arrays: asyncpg
    # checks each element of each array it encodes, a good part of an acknowledgement's cost.
    rows = await conn.fetch(
        DELIVER_SQL,
        [item.id for item in leases],
        [item.attempt for item in leases],
        max(c.ts for c in ordered),
        leases[0].owner,
        worker,
        [c.detail[:500] for c in ordered],
        [c.ts for c in ordered],
        [c.latency_s for c in ordered],
        [c.send_s for c in ordered],
    )
    return {row[0] for row in rows}
