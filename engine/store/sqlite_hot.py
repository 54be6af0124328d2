"""The enqueue, the claim and the acknowledgement of deliveries on SQLite, each one trip to
its thread.

aiosqlite runs every driver call on the connection's own thread, and SQLAlchemy makes several
calls per statement (cursor, execute, fetch, close), so a claim through SQLAlchemy is about
eight trips there and back and an acknowledgement eleven. Each trip hands the GIL between
two threads, which on a busy machine costs more than the statements themselves. These
functions take a plain ``sqlite3.Connection`` and run a whole transaction (``BEGIN
IMMEDIATE``, the statements, ``COMMIT``) in one call, which ``Database.write_in_thread``
sends to that thread as one trip.

The statements are the store's own, written out: the claim along ``ix_notifications_claim``
(see ``QueueRepo.claim``), the acknowledgement fenced on owner and attempt with the plain id
list beside the pairs (see ``completions.apply_delivered``), and the delivery-log rows. The
counts kept by triggers change in the same transaction, as they do through SQLAlchemy. The
contract tests run both stores through these.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from engine.core.domain import EXPIRED_DETAIL, NotificationState
from engine.store.records import Completion
from engine.store.suppressions import SUPPRESSED, SUPPRESSED_DETAIL, gone_of

__all__ = [
    "CHUNK",
    "CLAIM_SQL",
    "LOG_SQL",
    "claim",
    "claim_many",
    "deliver",
    "deliver_sql",
    "enqueue",
    "enqueue_sql",
]

_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_DELIVERED = NotificationState.DELIVERED.value
_EXPIRED = NotificationState.EXPIRED.value

CHUNK = 500  # pairs per grouped update: 1,504 parameters, far below SQLite's limit

# A row whose deadline has passed is not leased but ends expired, in the same statement: it
# comes back with the leased ones, and ``QueueRepo._leases`` leaves it out by its deadline.
_PAST = "expires_at <= :now"
CLAIM_SQL = (
    f"UPDATE notifications SET state = CASE WHEN {_PAST} THEN :expired ELSE :leased END,"
    f" lease_owner = CASE WHEN {_PAST} THEN NULL ELSE :owner END,"
    f" lease_expires_at = CASE WHEN {_PAST} THEN NULL ELSE :expires END,"
    f" finished_at = CASE WHEN {_PAST} THEN :now ELSE finished_at END,"
    f" last_error = CASE WHEN {_PAST} THEN :why ELSE last_error END,"
    " attempt = attempt + 1"
    " WHERE id IN (SELECT id FROM notifications INDEXED BY ix_notifications_claim"
    " WHERE state = :queued AND tenant_id = :tenant AND provider_id = :provider"
    " AND available_at <= :now ORDER BY priority DESC, id LIMIT :n)"
    " RETURNING id, recipient, payload, idempotency_key, attempt, failures, max_attempts,"
    " enqueued_at, expires_at, available_at"
)

LOG_SQL = (
    "INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt, outcome,"
    " detail, worker, ts, latency_s, send_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@functools.lru_cache(maxsize=64)
def deliver_sql(n: int) -> str:
    """The grouped update to delivered of ``n`` (id, attempt) pairs, as
    ``completions.apply_delivered`` writes it: the plain id list lets SQLite look the rows up
    by rowid; the pairs fence."""
    ids = ", ".join(["?"] * n)
    pairs = ", ".join(["(?, ?)"] * n)
    return (
        "UPDATE notifications SET state = ?, lease_owner = NULL, lease_expires_at = NULL,"
        f" finished_at = ? WHERE id IN ({ids}) AND (id, attempt) IN (VALUES {pairs})"
        " AND lease_owner = ? AND state = ? RETURNING id"
    )


_COLUMNS = (
    "tenant_id",
    "provider_id",
    "recipient",
    "payload",
    "idempotency_key",
    "priority",
    "state",
    "attempt",
    "failures",
    "max_attempts",
    "available_at",
    "enqueued_at",
    "expires_at",
)
_ROWS = 500  # rows per insert: 6,500 parameters, below SQLite's limit of 32,766


# Whether the tenant keeps a suppression list: one probe (nearly all keep none, and their rows
# need no digests).
_LISTED = "SELECT 1 FROM suppressions WHERE tenant_id = ? LIMIT 1"


@functools.lru_cache(maxsize=64)
def enqueue_sql(n: int) -> str:
    """The insert of ``n`` rows; a key the tenant used before (or twice in the statement) is
    not inserted, and only the inserted rows come back."""
    row = "(" + ", ".join(["?"] * len(_COLUMNS)) + ")"
    return (
        f"INSERT INTO notifications ({', '.join(_COLUMNS)}) VALUES {', '.join([row] * n)}"
        " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id, idempotency_key"
    )


def enqueue(
    conn: sqlite3.Connection,
    tenant_id: int,
    rows: Sequence[dict[str, Any]],
    wanted: Callable[[], Sequence[tuple[int, Sequence[str]]]],
) -> tuple[dict[str, int], set[str], set[str]]:
    """Insert ``rows`` (``QueueRepo._row``'s dicts, one tenant's) unless the tenant used their
    key before; those whose recipient the tenant suppressed for their provider (``wanted()``:
    each row's provider id and recipient digests, see ``suppressions.gone_of``, made only
    when the tenant keeps a list at all) are inserted suppressed. Returns the id of every key,
    the keys inserted now, and those of them suppressed. One transaction."""
    ids: dict[str, int] = {}
    fresh: set[str] = set()
    _transaction(conn)
    try:
        listed = conn.execute(_LISTED, (tenant_id,)).fetchone() is not None
        gone = gone_of(conn, tenant_id, wanted()) if listed else set()
        for start in range(0, len(rows), _ROWS):
            chunk = rows[start : start + _ROWS]
            params = [row[column] for row in chunk for column in _COLUMNS]
            for row_id, key in conn.execute(enqueue_sql(len(chunk)), params).fetchall():
                ids[key] = row_id
                fresh.add(key)
        missing = [r["idempotency_key"] for r in rows if r["idempotency_key"] not in ids]
        for start in range(0, len(missing), CHUNK):
            chunk = missing[start : start + CHUNK]
            marks = ", ".join(["?"] * len(chunk))
            found = conn.execute(
                "SELECT id, idempotency_key FROM notifications"
                f" WHERE tenant_id = ? AND idempotency_key IN ({marks})",
                [tenant_id, *chunk],
            )
            ids.update({key: row_id for row_id, key in found})
        suppressed = _first_of_keys(rows, gone) & fresh if gone else set()
        if suppressed:  # rare: inserted queued above, finished here in the same transaction
            _suppress(conn, [ids[key] for key in suppressed], rows[0]["enqueued_at"])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return ids, fresh, suppressed


def _first_of_keys(rows: Sequence[dict[str, Any]], indexes: set[int]) -> set[str]:
    """The keys whose first row (the one inserted: a repeat names it) is among ``indexes``."""
    first: dict[str, int] = {}
    for index, row in enumerate(rows):
        first.setdefault(row["idempotency_key"], index)
    return {key for key, index in first.items() if index in indexes}


def _suppress(conn: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        conn.execute(
            "UPDATE notifications SET state = ?, finished_at = ?, last_error = ?"
            f" WHERE id IN ({', '.join(['?'] * len(chunk))})",
            [SUPPRESSED, now, SUPPRESSED_DETAIL, *chunk],
        )


def _transaction(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def claim(
    conn: sqlite3.Connection,
    tenant_id: int,
    provider_id: int,
    n: int,
    owner: str,
    expires: float,
    now: float,
) -> list[tuple[Any, ...]]:
    """Lease up to ``n`` due rows of one key to ``owner`` until ``expires``; returns the leased
    rows, and those that expired instead (id, recipient, payload, idempotency_key, attempt,
    failures, max_attempts, enqueued_at, expires_at, available_at)."""
    args = {
        "leased": _LEASED,
        "owner": owner,
        "expires": expires,
        "queued": _QUEUED,
        "expired": _EXPIRED,
        "why": EXPIRED_DETAIL,
        "tenant": tenant_id,
        "provider": provider_id,
        "now": now,
        "n": n,
    }
    _transaction(conn)
    try:
        rows = conn.execute(CLAIM_SQL, args).fetchall()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return rows


def claim_many(
    conn: sqlite3.Connection,
    asks: Sequence[tuple[int, int, int]],
    owner: str,
    expires: float,
    now: float,
) -> list[list[tuple[Any, ...]]]:
    """``claim`` for each (tenant, provider, n) of ``asks``, in one transaction (one trip to
    the writer's thread); returns each ask's leased rows, in the order of ``asks``."""
    args: dict[str, Any] = {
        "leased": _LEASED,
        "owner": owner,
        "expires": expires,
        "queued": _QUEUED,
        "expired": _EXPIRED,
        "why": EXPIRED_DETAIL,
        "now": now,
    }
    _transaction(conn)
    try:
        found = []
        for tenant_id, provider_id, n in asks:
            args["tenant"], args["provider"], args["n"] = tenant_id, provider_id, n
            found.append(conn.execute(CLAIM_SQL, args).fetchall())
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return found


def deliver(conn: sqlite3.Connection, completions: Sequence[Completion], worker: str) -> set[int]:
    """Mark ``completions`` (every one delivered, all of one lease owner) delivered where the
    lease still holds (same owner, same attempt, still leased), and write a delivery-log row
    for each of those; returns the ids applied. One transaction."""
    ordered = sorted(completions, key=lambda c: c.leased.id)
    owner = ordered[0].leased.owner
    finished_at = max(c.ts for c in ordered)
    _transaction(conn)
    try:
        applied: set[int] = set()
        for start in range(0, len(ordered), CHUNK):
            chunk = ordered[start : start + CHUNK]
            params: list[Any] = [_DELIVERED, finished_at]
            params += [c.leased.id for c in chunk]
            for c in chunk:
                params += (c.leased.id, c.leased.attempt)
            params += [owner, _LEASED]
            applied.update(row[0] for row in conn.execute(deliver_sql(len(chunk)), params))
        conn.executemany(LOG_SQL, [_log_row(c, worker) for c in ordered if c.leased.id in applied])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied


def _log_row(c: Completion, worker: str) -> tuple[Any, ...]:
    leased = c.leased
    return (
        leased.id,
        leased.tenant_id,
        leased.provider_id,
        leased.attempt,
        c.outcome.value,
        c.detail[:500],
        worker,
        c.ts,
        c.latency_s,
        c.send_s,
    )
