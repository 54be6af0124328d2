"""The notification queue: idempotent enqueue, fenced leases, completions, dead letters.

Every read or write of notification data takes the tenant's id, except the lease operations,
which are keyed by the lease owner and attempt they hold.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import NotificationState, Outcome
from engine.core.errors import SecretUnreadable
from engine.store import pg_hot, sqlite_hot
from engine.store.database import picked_once
from engine.store.notify import CHANNEL
from engine.store.payloads import payload_texts
from engine.store.records import (
    Completion,
    EnqueueResult,
    Leased,
    NotificationRow,
)
from engine.store.repairs import QueueRepairs
from engine.store.schema import delivery_log, notifications
from engine.store.suppressions import by_item, lazy_digests, record_gone

__all__ = ["LEASED_ONLY", "QueueRepo", "reap_statement", "renew_statement"]

N = notifications
_CHUNK = 500
_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_DEAD = NotificationState.DEAD.value
# Leased rows, with the state as a literal: the lease indexes are partial on exactly this, and a
# Postgres prepared statement's generic plan uses them only when its text says so (schema.py).
LEASED_ONLY = N.c.state == sa.literal_column(f"'{_LEASED}'")


class QueueRepo(QueueRepairs):
    """The queue: the reads of ``QueueReads``, the repairs of ``QueueRepairs`` and every
    other write."""

    # -- enqueue ----------------------------------------------------------------------------

    async def enqueue(
        self,
        tenant_id: int,
        items: Sequence[NotificationRow],
        *,
        now: float,
        made_up: bool = False,
    ) -> list[EnqueueResult]:
        """Insert ``items`` for one tenant. An item whose idempotency key the tenant already used
        is not inserted again: its result names the existing notification, ``duplicate=True``.
        Results come in the order of ``items``. All or nothing per call. ``made_up``: every
        key was made up for this call, so none can have been used (spares Postgres a check)."""
        if not items:
            return []
        recipients = [item.recipient for item in items]
        tokens = self._box.encrypt_many(recipients)

        # Looked up on the tenant's suppression list as they are inserted, if it keeps one.
        digests = lazy_digests(self._box, recipients)
        payloads = payload_texts([item.payload for item in items])
        if self._db.is_sqlite:  # one trip to its thread: see engine/store/sqlite_hot.py
            rows = [
                self._row(tenant_id, item, token, payload, now)
                for item, token, payload in zip(items, tokens, payloads, strict=True)
            ]
            wanted = functools.partial(by_item, [i.provider_id for i in items], digests)
            ids, fresh, gone = await self._db.write_in_thread(
                functools.partial(sqlite_hot.enqueue, tenant_id=tenant_id, rows=rows, wanted=wanted)
            )
        else:  # one statement: see engine/store/pg_hot.py
            ids, fresh, gone = await self._db.write_on_driver(
                functools.partial(
                    pg_hot.enqueue,
                    tenant_id=tenant_id,
                    items=items,
                    recipients=tokens,
                    payloads=payloads,
                    digests=digests,
                    now=now,
                    notify=(CHANNEL, self._db.origin),
                    made_up=made_up,
                    listed=self._listed,
                )
            )
        return _results(items, ids, fresh, gone)

    def _row(
        self, tenant_id: int, item: NotificationRow, recipient: str, payload: str, now: float
    ) -> dict[str, Any]:
        """``item`` as SQLite's enqueue inserts it, its recipient encrypted and its payload
        encoded."""
        return {
            "tenant_id": tenant_id,
            "provider_id": item.provider_id,
            "recipient": recipient,
            "payload": payload,
            "idempotency_key": item.idempotency_key,
            "priority": item.priority,
            "state": _QUEUED,
            "attempt": 0,
            "failures": 0,
            "max_attempts": item.max_attempts,
            "available_at": now if item.available_at is None else item.available_at,
            "enqueued_at": now,
        }

    # -- dispatch ---------------------------------------------------------------------------
    async def claim(
        self, tenant_id: int, provider_id: int, n: int, *, owner: str, lease_s: float, now: float
    ) -> list[Leased]:
        """Lease up to ``n`` due notifications of one key to ``owner``, highest priority first,
        then oldest. Each claim bumps ``attempt``: the fencing token its completion must show."""
        expires = now + lease_s
        if self._db.is_sqlite:
            rows: list[Any] = await self._db.write_in_thread(
                functools.partial(
                    sqlite_hot.claim,
                    tenant_id=tenant_id,
                    provider_id=provider_id,
                    n=n,
                    owner=owner,
                    expires=expires,
                    now=now,
                )
            )
        else:
            rows = await self._db.write_on_driver(
                functools.partial(
                    pg_hot.claim,
                    tenant_id=tenant_id,
                    provider_id=provider_id,
                    n=n,
                    owner=owner,
                    expires=expires,
                    now=now,
                ),
                lane="claim",  # one claim at a time per dispatcher: a connection of its own
            )
        return await self._leases(rows, tenant_id, provider_id, owner, expires)

    async def _leases(
        self, rows: Sequence[Any], tenant_id: int, provider_id: int, owner: str, expires: float
    ) -> list[Leased]:
        """A claim's rows as leases, in id order; with keys that cannot open a recipient the
        rows go back at once, unspent, and ``SecretUnreadable`` is raised."""
        decrypt, loads = self._box.decrypt, json.loads
        try:
            leased = [
                Leased(  # by position, as the fields go: made per row
                    i,
                    tenant_id,
                    provider_id,
                    decrypt(recipient),
                    loads(payload),
                    key,
                    attempt,
                    failures,
                    max_attempts,
                    enqueued_at,
                    owner,
                    expires,
                )
                for i, recipient, payload, key, attempt, failures, max_attempts, enqueued_at in rows
            ]
        except SecretUnreadable:
            # The keys are wrong: nothing can be sent. The rows go back at once, unspent, for a
            # worker with the right keys, rather than wait out their lease.
            await self.release(owner, [_unread(row, tenant_id, provider_id, owner) for row in rows])
            raise
        leased.sort(key=lambda item: item.id)
        return leased

    async def claim_many(
        self, asks: Sequence[tuple[int, int, int]], *, owner: str, lease_s: float, now: float
    ) -> list[list[Leased]]:
        """``claim`` for each (tenant id, provider id, n) of ``asks`` at once: one statement
        on Postgres, one transaction on SQLite. Returns each ask's leases, in order."""
        if len(asks) <= 1:  # the single claim's plainer statement (and none for no ask)
            return [await self.claim(*a, owner=owner, lease_s=lease_s, now=now) for a in asks]
        expires = now + lease_s
        if self._db.is_sqlite:
            found: list[list[Any]] = await self._db.write_in_thread(
                functools.partial(
                    sqlite_hot.claim_many, asks=asks, owner=owner, expires=expires, now=now
                )
            )
        else:
            found = await self._db.write_on_driver(
                functools.partial(
                    pg_hot.claim_many, asks=asks, owner=owner, expires=expires, now=now
                ),
                lane="claim",
            )
        pairs = list(zip(asks, found, strict=True))
        try:
            return [await self._leases(rows, t, p, owner, expires) for (t, p, _n), rows in pairs]
        except SecretUnreadable:  # every key's rows go back, not only the unreadable one's
            await self.release(
                owner, [_unread(r, t, p, owner) for (t, p, _n), rs in pairs for r in rs]
            )
            raise

    async def renew(self, owner: str, *, lease_s: float, now: float) -> int:
        """Extend every lease ``owner`` holds; returns how many it still holds."""
        statement = renew_statement(owner, now + lease_s, is_sqlite=self._db.is_sqlite)

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(statement)).rowcount)

        return await self._db.write(tx)

    async def release(self, owner: str, leased: Sequence[Leased]) -> int:
        """Give leases back unsent (on stop, or leased ahead for a provider that asked to
        wait): queued again at once, no attempt spent. One statement per chunk, fenced on
        owner and (id, attempt) as the grouped acknowledgement is; returns how many held."""
        items = sorted(leased, key=lambda item: item.id)

        async def tx(conn: AsyncConnection) -> int:
            count = 0
            for start in range(0, len(items), _CHUNK):
                chunk = items[start : start + _CHUNK]
                result = await conn.execute(
                    N.update()
                    .where(
                        N.c.id.in_([item.id for item in chunk])
                        & sa.tuple_(N.c.id, N.c.attempt).in_([(i.id, i.attempt) for i in chunk])
                        # No index serves these: the rows are found by id (see _DELIVER).
                        & N.c.lease_owner.is_not_distinct_from(owner)
                        & N.c.state.is_not_distinct_from(_LEASED)
                    )
                    .values(state=_QUEUED, lease_owner=None, lease_expires_at=None)
                )
                count += result.rowcount
            return count

        return await self._db.write(tx) if leased else 0

    async def complete(self, completions: Sequence[Completion], *, worker: str) -> list[bool]:
        """Write outcomes back, each only if its lease still holds (same owner and attempt).
        Returns, per completion, whether it was applied; a delivery log row is written for
        each applied one. Deliveries are written with one statement per batch."""

        async def tx(conn: AsyncConnection) -> list[bool]:
            ok: set[int] = set()
            # One statement per lease owner: _apply_delivered fences a batch on one owner.
            delivered: dict[str, list[Completion]] = {}
            for c in completions:
                if c.state is NotificationState.DELIVERED:
                    delivered.setdefault(c.leased.owner, []).append(c)
            for mine in delivered.values():
                for start in range(0, len(mine), _CHUNK):
                    ok |= await _apply_delivered(conn, mine[start : start + _CHUNK])
            ok |= await self._apply_rest(conn, completions)
            applied = [c.leased.id in ok for c in completions]
            log_rows = [_log_row(c, worker) for c in completions if c.leased.id in ok]
            if log_rows:
                await conn.execute(_LOG_INSERT, log_rows)
            return applied

        if len({c.leased.id for c in completions}) != len(completions):
            raise ValueError("a batch of completions must not name a notification twice")
        if not completions:
            return []
        if _all_delivered_by_one(completions):
            return await self._deliver(completions, worker)
        return await self._db.write(tx)

    async def _apply_rest(
        self, conn: AsyncConnection, completions: Sequence[Completion]
    ) -> set[int]:
        """The completions other than deliveries, rare (retries, throttles, dead letters): one
        by one, in id order, as every multi-row writer here, so that two writers never
        deadlock; a recipient the provider said is gone goes on the tenant's suppression list.
        Returns the ids applied."""
        ok = set()
        for c in completions:
            if c.state is not NotificationState.DELIVERED and await _apply(conn, c):
                ok.add(c.leased.id)
        gone = [c for c in completions if c.gone and c.leased.id in ok]
        if gone:
            await record_gone(conn, self._box, gone, db=self._db)
        return ok

    async def _deliver(self, done: Sequence[Completion], worker: str) -> list[bool]:
        """The common batch (every one delivered, one lease owner): the same writes as
        ``complete``'s, in one trip to SQLite's driver thread or one statement on Postgres."""
        if self._db.is_sqlite:
            ok = await self._db.write_in_thread(
                functools.partial(sqlite_hot.deliver, completions=done, worker=worker)
            )
        else:
            ok = await self._db.write_on_driver(
                functools.partial(pg_hot.deliver, completions=done, worker=worker),
                lane="deliver",  # the completer's, one batch at a time
            )
        return [c.leased.id in ok for c in done]

    async def reap(self, now: float) -> int:
        """Return every expired lease to the queue; the next claim bumps its attempt."""

        async def tx(conn: AsyncConnection) -> int:
            return int((await conn.execute(reap_statement(now))).rowcount)

        return await self._db.write(tx)


def renew_statement(owner: str, until: float, *, is_sqlite: bool) -> sa.Update:
    """Extend ``owner``'s leases to ``until``: found through ``ix_notifications_leased_owner``.
    Rows being completed right now are skipped (Postgres): they need no renewal, and waiting
    on them would invite a deadlock with the completer."""
    mine = sa.select(N.c.id).where((N.c.lease_owner == owner) & LEASED_ONLY).order_by(N.c.id)
    return (
        N.update()
        .where(N.c.id.in_(picked_once(mine, is_sqlite=is_sqlite)))
        .values(lease_expires_at=until)
    )


def reap_statement(now: float) -> sa.Update:
    """Queue again every lease expired by ``now``: found through
    ``ix_notifications_leased_expiry``."""
    return (
        N.update()
        .where(LEASED_ONLY & (N.c.lease_expires_at < now))
        .values(state=_QUEUED, lease_owner=None, lease_expires_at=None, available_at=now)
    )


def _all_delivered_by_one(completions: Sequence[Completion]) -> bool:
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
_LOG_INSERT = delivery_log.insert()


async def _apply_delivered(conn: AsyncConnection, batch: Sequence[Completion]) -> set[int]:
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


async def _apply(conn: AsyncConnection, c: Completion) -> bool:
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


def _log_row(c: Completion, worker: str) -> dict[str, Any]:
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


def _results(
    items: Sequence[NotificationRow], ids: dict[str, int], fresh: set[str], gone: set[str]
) -> list[EnqueueResult]:
    """Per item, in order: its id, whether its key was used before (``fresh``: the keys
    inserted now; a key repeated within one call is a duplicate the second time), and whether
    it was inserted suppressed (``gone``)."""
    results = []
    for item in items:
        key = item.idempotency_key
        new = key in fresh
        results.append(EnqueueResult(ids[key], key, not new, new and key in gone))
        fresh.discard(key)
    return results


def _unread(row: Any, tenant_id: int, provider_id: int, owner: str) -> Leased:
    """A claimed row as a lease to give back, its recipient left sealed (not needed)."""
    i, _, _, key, attempt, failures, max_attempts, enqueued_at = row
    return Leased(
        *(i, tenant_id, provider_id, "", {}, key),
        *(attempt, failures, max_attempts, enqueued_at, owner, 0.0),
    )
