"""Outcomes written back to the notifications they were leased for, each only while its lease
holds (same owner, same attempt, still leased): the grouped acknowledgement of deliveries, the
one-by-one write of the rarer outcomes (retries, throttles, dead letters, expiries), and the
delivery log's rows. ``QueueRepo.complete`` runs them in its transaction; ``sqlite_hot`` and
``pg_hot`` write the common batch (every one delivered) in one trip instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState, Outcome
from engine.store.records import Completion, Leased
from engine.store.schema import delivery_log, notifications

__all__ = ["LOG_INSERT", "all_delivered_by_one", "apply_delivered", "apply_one", "log_row"]

N = notifications
_LEASED = NotificationState.LEASED.value


def all_delivered_by_one(completions: Sequence[Completion]) -> bool:
    owner, delivered = completions[0].leased.owner, NotificationState.DELIVERED
    return all(
        c.state is delivered and c.outcome is Outcome.DELIVERED and c.leased.owner == owner
        for c in completions
    )


def _fenced(item: Leased, owner: str) -> sa.Update:
    return N.update().where(
        (N.c.id == item.id)
        & (N.c.lease_owner == owner)
        & (N.c.attempt == item.attempt)
        & (N.c.state == _LEASED)
    )


# The grouped acknowledgement, built once: SQLAlchemy then finds its compiled form without
# building and hashing a new statement per batch. The plain id list lets SQLite (after
# ANALYZE) look rows up by rowid; the (id, attempt) pairs are the fence. Owner and state are
# tested with IS NOT DISTINCT FROM, which no Postgres index serves, so that the rows are found
# by primary key and not through the owner and state indexes' entries left since the last
# vacuum (``pg_hot.DELIVER_SQL`` says more).
_DELIVER = (
    N.update()
    .where(
        N.c.id.in_(sa.bindparam("ack_ids", expanding=True))
        & sa.tuple_(N.c.id, N.c.attempt).in_(sa.bindparam("ack_pairs", expanding=True))
        & N.c.lease_owner.is_not_distinct_from(sa.bindparam("ack_owner"))
        & N.c.state.is_not_distinct_from(sa.bindparam("ack_state"))
    )
    .values(
        state=sa.bindparam("new_state"),
        lease_owner=None,
        lease_expires_at=None,
        finished_at=sa.bindparam("new_finished"),
    )
    .returning(N.c.id)
)
LOG_INSERT = delivery_log.insert()


async def apply_delivered(conn: AsyncConnection, batch: Sequence[Completion]) -> set[int]:
    pairs = sorted((c.leased.id, c.leased.attempt) for c in batch)
    params = {
        "ack_ids": [pair[0] for pair in pairs],
        "ack_pairs": pairs,
        "ack_owner": batch[0].leased.owner,
        "ack_state": _LEASED,
        "new_state": NotificationState.DELIVERED.value,
        "new_finished": max(c.ts for c in batch),
    }
    return {row.id for row in await conn.execute(_DELIVER, params)}


async def apply_one(conn: AsyncConnection, c: Completion) -> bool:
    values: dict[str, Any] = {
        "state": c.state.value,
        "lease_owner": None,
        "lease_expires_at": None,
    }
    if c.state is NotificationState.QUEUED:
        values["available_at"] = c.available_at if c.available_at is not None else c.ts
    else:
        values["finished_at"] = c.ts
    if c.spend_attempt:
        values["failures"] = N.c.failures + 1
    if c.outcome is not Outcome.DELIVERED:
        values["last_error"] = c.detail[:500]
    result = await conn.execute(_fenced(c.leased, c.leased.owner).values(values))
    return bool(result.rowcount)


def log_row(c: Completion, worker: str) -> dict[str, Any]:
    return {
        "notification_id": c.leased.id,
        "tenant_id": c.leased.tenant_id,
        "provider_id": c.leased.provider_id,
        "attempt": c.leased.attempt,
        "outcome": c.outcome.value,
        "detail": c.detail[:500],
        "worker": worker,
        "ts": c.ts,
        "latency_s": c.latency_s,
        "send_s": c.send_s,
    }
