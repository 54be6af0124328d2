"""The queue's kept counts and the look at a pair's due rows, as SQL: what the dispatcher's
reads (``QueueRepo.due_pairs``, ``queued_counts``, ...) and the depth of each tenant
(``NotificationsRepo.depth``) send.

The counts come from ``queue_counts`` (kept by the triggers of migration 0003); a look at a pair
reads one bounded range of an index, however many rows the store keeps.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState
from engine.store.records import Share
from engine.store.schema import notifications, queue_counts

__all__ = [
    "DUE_CAP",
    "PAIRS_PER_QUERY",
    "PROBE_SIZES",
    "QUEUED_COUNTS",
    "count_entry",
    "counts",
    "due_probes",
    "queued_counts_of",
]

N = notifications
_QUEUED = NotificationState.QUEUED.value
DUE_CAP = 1024  # due rows counted per pair and refresh; the dispatcher needs at least a batch
PAIRS_PER_QUERY = 100  # pairs probed per UNION ALL (SQLite allows 500 terms in a compound)
PROBE_SIZES = (1, 4, 16, 50, PAIRS_PER_QUERY)  # the UNION ALLs built (and compiled) once each


def count_entry(row: Sequence[Any]) -> tuple[tuple[int, int], int]:
    tenant_id, provider_id, n = row
    return (tenant_id, provider_id), int(n)


QUEUED_COUNTS = (
    sa.select(queue_counts.c.tenant_id, queue_counts.c.provider_id, sa.func.sum(queue_counts.c.n))
    .where(queue_counts.c.state == _QUEUED)
    .group_by(queue_counts.c.tenant_id, queue_counts.c.provider_id)
    .having(sa.func.sum(queue_counts.c.n) > 0)
)


def queued_counts_of(share: Share) -> sa.Select[Any]:
    """``QUEUED_COUNTS`` for one worker's ``share``: ``share_index`` in SQL (the same integer
    arithmetic on Postgres and SQLite: a product under 2**63, a remainder, a shift)."""
    hashed = (queue_counts.c.tenant_id * sa.literal_column("2654435761")) % sa.literal_column(
        "4294967296"
    )
    index = (hashed * share.workers).op(">>")(sa.literal_column("32"))
    total = sa.func.sum(queue_counts.c.n)
    return QUEUED_COUNTS.having(sa.or_(index == share.index, total >= share.deep))


async def counts(conn: AsyncConnection) -> list[tuple[int, int, str, int]]:
    """(tenant, provider, state, rows) with rows != 0, summed over the shards."""
    C = queue_counts
    query = (
        sa.select(C.c.tenant_id, C.c.provider_id, C.c.state, sa.func.sum(C.c.n))
        .group_by(C.c.tenant_id, C.c.provider_id, C.c.state)
        .having(sa.func.sum(C.c.n) != 0)
    )
    return [(r[0], r[1], r[2], int(r[3])) for r in await conn.execute(query)]


@functools.lru_cache(maxsize=len(PROBE_SIZES))
def due_probes(n: int) -> sa.CompoundSelect[Any]:
    """The look at ``n`` pairs (bound as ``t0, p0, ...``, and ``now``), built once per ``n``:
    SQLAlchemy then finds its compiled form in its cache instead of building it per look."""
    return sa.union_all(*(_due_probe(i) for i in range(n)))


def _due_probe(i: int) -> sa.Select[Any]:
    """One pair's capped count of due rows and its earliest ``available_at``, each a range of
    ``ix_notifications_queued_due``, and its queued rows in the kept counts."""
    tenant = sa.bindparam(f"t{i}", type_=sa.Integer)
    provider = sa.bindparam(f"p{i}", type_=sa.Integer)
    now = sa.bindparam("now", type_=sa.Double)
    key = (N.c.state == _QUEUED) & (N.c.tenant_id == tenant) & (N.c.provider_id == provider)
    # Ordered as the index is, so that Postgres walks it rather than the whole table.
    capped = (
        sa.select(N.c.id)
        .where(key & (N.c.available_at <= now))
        .order_by(N.c.available_at)
        .limit(DUE_CAP)
        .subquery()
    )
    due = sa.select(sa.func.count()).select_from(capped).scalar_subquery()
    first = sa.select(sa.func.min(N.c.available_at)).where(key).scalar_subquery()
    C = queue_counts
    counted = (
        sa.select(sa.func.sum(C.c.n))
        .where((C.c.tenant_id == tenant) & (C.c.provider_id == provider) & (C.c.state == _QUEUED))
        .scalar_subquery()
    )
    return sa.select(tenant, provider, due, first, counted)
