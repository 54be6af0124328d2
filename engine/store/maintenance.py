"""Store-wide chores: retention settings, pruning in small batches, chore leases, size.

Pruning deletes finished rows only (delivered, dead and cancelled notifications by
``finished_at``, the delivery and audit logs by ``ts``), each batch its own short transaction,
so it never holds SQLite's one write lock for long nor grows a Postgres transaction. Every
delete re-checks the state and age of the rows it removes: a queued or leased notification is
never deleted, even when it changed state between the pick and the delete.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState
from engine.core.retention import PruneReport, Retention
from engine.store.database import Database, picked_once
from engine.store.records import StoreSize
from engine.store.schema import (
    api_requests,
    audit_log,
    chore_leases,
    delivery_log,
    notifications,
    queue_counts,
    settings,
    status_events,
    suppressions,
)

__all__ = ["MaintenanceRepo"]

N = notifications
R = api_requests
SP = suppressions
SE = status_events
_ABANDONED_S = 86400.0
_RETENTION = "retention"
_VACUUM_PAGES = 2048  # pages given back per transaction (8 MiB at SQLite's default 4 KiB)
_TABLES = (
    "notifications",
    "delivery_log",
    "audit_log",
    "queue_counts",
    "tenants",
    "providers",
    "api_requests",
    "suppressions",
    "status_events",
)


class MaintenanceRepo:
    def __init__(self, db: Database, *, batch: int = 1000) -> None:
        self._db = db
        self._insert = db.insert
        self.batch = batch

    # -- settings ---------------------------------------------------------------------------

    async def retention(self) -> Retention:
        """The store's retention windows (the defaults until someone sets them)."""

        async def tx(conn: AsyncConnection) -> Retention:
            query = sa.select(settings.c.value).where(settings.c.name == _RETENTION)
            value = (await conn.execute(query)).scalar()
            return Retention() if value is None else Retention.from_dict(json.loads(value))

        return await self._db.read(tx)

    async def retention_set(self, retention: Retention, *, now: float, actor: str) -> None:
        """Store ``retention`` for every process, and audit the change, in one transaction."""
        value = json.dumps(retention.as_dict())

        async def tx(conn: AsyncConnection) -> None:
            stmt = self._insert(settings).values(name=_RETENTION, value=value, updated_at=now)
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[settings.c.name],
                    set_={"value": value, "updated_at": now},
                )
            )
            await conn.execute(
                sa.insert(audit_log).values(
                    ts=now, actor=actor, action="retention.set", tenant_id=None, detail=value
                )
            )

        await self._db.write(tx)

    # -- chore leases -----------------------------------------------------------------------

    async def try_chore(self, name: str, owner: str, *, hold_s: float, now: float) -> bool:
        """Take the chore ``name`` for ``hold_s`` unless another owner holds it unexpired.
        Many engines call this on their own timers; one of them wins each period."""
        values = {"name": name, "owner": owner, "expires_at": now + hold_s}
        stmt = (
            self._insert(chore_leases)
            .values(values)
            .on_conflict_do_update(
                index_elements=[chore_leases.c.name],
                set_={"owner": owner, "expires_at": now + hold_s},
                where=(chore_leases.c.expires_at <= now) | (chore_leases.c.owner == owner),
            )
            .returning(chore_leases.c.name)
        )

        async def tx(conn: AsyncConnection) -> bool:
            return (await conn.execute(stmt)).first() is not None

        return await self._db.write(tx)

    async def chore_done(self, name: str, *, now: float) -> None:
        """Record that the chore ``name`` just ran (by its lease holder or on request)."""
        stmt = (
            self._insert(chore_leases)
            .values(name=name, owner="", expires_at=0.0, last_run_at=now)
            .on_conflict_do_update(index_elements=[chore_leases.c.name], set_={"last_run_at": now})
        )

        async def tx(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        await self._db.write(tx)

    async def chore_last_run(self, name: str) -> float | None:
        async def tx(conn: AsyncConnection) -> float | None:
            query = sa.select(chore_leases.c.last_run_at).where(chore_leases.c.name == name)
            return (await conn.execute(query)).scalar()

        return await self._db.read(tx)

    # -- pruning ----------------------------------------------------------------------------

    async def prune(
        self,
        retention: Retention,
        *,
        now: float,
        dry_run: bool = False,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> PruneReport:
        """Delete (or count, with ``dry_run``) what ``retention`` no longer keeps, batch by
        batch, until nothing is left or ``should_stop()`` says so between batches."""
        targets = _targets(retention, now)
        counts: dict[str, int] = dict.fromkeys(targets, 0)
        complete = True
        for kind, (where, table, oldest) in targets.items():
            if dry_run:
                counts[kind] = await self._count(table, where)
                continue
            while True:
                deleted = await self._delete_batch(table, where, oldest)
                counts[kind] += deleted
                if deleted < self.batch:
                    break
                if should_stop():
                    complete = False
                    break
                await asyncio.sleep(0)  # let the dispatcher's writes in between batches
            if not complete:
                break
        return PruneReport(**counts, dry_run=dry_run, complete=complete)

    async def _count(self, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
        async def tx(conn: AsyncConnection) -> int:
            query = sa.select(sa.func.count()).select_from(table).where(where)
            return int((await conn.execute(query)).scalar() or 0)

        return await self._db.read(tx)

    async def _delete_batch(
        self, table: sa.Table, where: sa.ColumnElement[bool], oldest: sa.ColumnElement[Any]
    ) -> int:
        # Oldest first, as the index is ordered: Postgres then walks the index instead of
        # scanning the table for rows that match.
        pick = sa.select(table.c.id).where(where).order_by(oldest).limit(self.batch)
        # The outer condition again: a row that changed between the pick and the delete (a
        # dead letter retried meanwhile) stays.
        ids = picked_once(pick, is_sqlite=self._db.is_sqlite)
        stmt = table.delete().where(table.c.id.in_(ids) & where)

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        return await self._db.write(tx)

    # -- the file ---------------------------------------------------------------------------

    async def release_space(self) -> int:
        """SQLite: give free pages back to the file system (incremental auto-vacuum, a few
        MiB per write) and refresh the planner's statistics (``PRAGMA optimize``, as SQLite
        recommends for long-lived connections). Returns the bytes given back. Postgres:
        nothing; autovacuum does both."""
        if not self._db.is_sqlite:
            return 0
        freed = 0
        while True:
            step = await self._db.give_back_pages(_VACUUM_PAGES)
            freed += step
            if step == 0 or (await self.size()).free_bytes == 0:
                break
        await self.optimize()
        return freed

    async def optimize(self) -> None:
        """SQLite: ``PRAGMA optimize``, which refreshes planner statistics where they are
        stale (bounded by ``analysis_limit``), as SQLite advises for long-lived connections and
        before closing. Postgres: nothing (autovacuum analyses)."""
        if self._db.is_sqlite:
            await self._db.write(_optimize)

    async def size(self) -> StoreSize:
        """The store's size on disk and the notifications it keeps (from the counts)."""

        async def tx(conn: AsyncConnection) -> StoreSize:
            kept = sa.select(sa.func.coalesce(sa.func.sum(queue_counts.c.n), 0))
            rows = int((await conn.execute(kept)).scalar() or 0)
            if self._db.is_sqlite:
                page = await _pragma("page_size")(conn)
                free = await _pragma("freelist_count")(conn)
                return StoreSize(_sqlite_bytes(self._db.url.database), free * page, rows)
            total = sa.text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                " WHERE c.relname = ANY(:names) AND c.relkind = 'r'"
                " AND c.relnamespace = current_schema()::regnamespace"
            )
            size = await conn.execute(total, {"names": list(_TABLES)})
            return StoreSize(int(size.scalar() or 0), None, rows)

        return await self._db.read(tx)


Target = tuple[sa.ColumnElement[bool], sa.Table, sa.ColumnElement[Any]]


def _targets(retention: Retention, now: float) -> dict[str, Target]:
    """What each window deletes: kind -> (condition, table, age column). A window of None
    deletes nothing."""
    found: dict[str, Target] = {}
    for kind, state, window in (
        ("delivered", NotificationState.DELIVERED, retention.delivered_s),
        ("dead", NotificationState.DEAD, retention.dead_s),
        ("cancelled", NotificationState.CANCELLED, retention.dead_s),  # kept as dead letters are
        ("suppressed", NotificationState.SUPPRESSED, retention.dead_s),
        ("expired", NotificationState.EXPIRED, retention.dead_s),
    ):
        if window is not None:
            where = (N.c.state == state.value) & (N.c.finished_at < now - window)
            found[kind] = (where, N, N.c.finished_at)
    for kind, table, window in (
        ("delivery_log", delivery_log, retention.log_s),
        ("audit_log", audit_log, retention.audit_s),
    ):
        if window is not None:
            found[kind] = (table.c.ts < now - window, table, table.c.ts)
    if retention.log_s is not None:  # the outbox: only events delivered or given up
        old = SE.c.finished_at < now - retention.log_s
        found["status_events"] = (old, SE, SE.c.finished_at)
    if retention.suppressions_s is not None:
        old = SP.c.created_at < now - retention.suppressions_s
        found["suppressions"] = (old, SP, SP.c.created_at)
    kept = [w for w in (retention.delivered_s, retention.dead_s) if w is not None]
    if len(kept) == 2:  # a window of None keeps some notifications, and so their keys, forever
        found["api_requests"] = (_forgotten_requests(now, min(kept)), R, R.c.created_at)
    return found


def _forgotten_requests(now: float, shortest_s: float) -> sa.ColumnElement[bool]:
    """The HTTP API's idempotency keys retention forgets: a finished request's once its first
    notification is gone (none can be gone before the shortest window has passed, so younger
    keys are not looked at), an abandoned one's (its server died) after a day."""
    gone = ~sa.exists().where(N.c.id == R.c.notification_id)
    finished = R.c.status.is_not(None) & (R.c.created_at < now - shortest_s) & gone
    abandoned = R.c.status.is_(None) & (R.c.created_at < now - _ABANDONED_S)
    return finished | abandoned


async def _optimize(conn: AsyncConnection) -> None:
    await conn.exec_driver_sql("PRAGMA optimize")


def _pragma(name: str) -> Callable[[AsyncConnection], Awaitable[int]]:
    async def read(conn: AsyncConnection) -> int:
        return int((await conn.exec_driver_sql(f"PRAGMA {name}")).scalar() or 0)

    return read


def _sqlite_bytes(path: str | None) -> int:
    """The database file and its write-ahead log, as the file system sees them."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.stat(f"{path}{suffix}").st_size
        except OSError:
            continue
    return total
