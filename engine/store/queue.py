"""The notification queue as the dispatcher uses it: idempotent enqueue, fenced leases,
completions, and the reads of which (tenant, provider) pairs have due work.

Every read or write of notification data takes the tenant's id, except the lease operations,
which are keyed by the lease owner and attempt they hold. A tenant's notifications as people
see them, and the repairs of dead letters, are ``NotificationsRepo``'s (``notifications.py``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.domain import NotificationState
from engine.core.errors import SecretUnreadable
from engine.store import pg_hot, sqlite_hot
from engine.store.completions import (
    LOG_INSERT,
    all_delivered_by_one,
    apply_delivered,
    apply_one,
    log_row,
)
from engine.store.counts import (
    PAIRS_PER_QUERY,
    PROBE_SIZES,
    QUEUED_COUNTS,
    count_entry,
    counts,
    due_probes,
    queued_counts_of,
)
from engine.store.database import Database, in_parts
from engine.store.leases import reap_statement, renew_statement
from engine.store.notify import CHANNEL
from engine.store.payloads import payload_texts
from engine.store.records import (
    Completion,
    DuePair,
    Enqueue,
    EnqueueResult,
    Leased,
    NotificationRow,
    Share,
)
from engine.store.schema import notifications
from engine.store.suppressions import by_item, lazy_digests, record_gone

__all__ = ["QueueRepo"]

N = notifications
_CHUNK = 500
_QUEUED = NotificationState.QUEUED.value
_LEASED = NotificationState.LEASED.value
_DEAD = NotificationState.DEAD.value
_SCHEDULED = NotificationState.SCHEDULED.value


class QueueRepo:
    """The queue as the dispatcher uses it: enqueues, leases and their completions, and the
    reads that tell it which pairs have due work (from the kept counts, ``counts.py``)."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box
        # Postgres: the tenants found to keep a suppression list (pg_hot.enqueue).
        self._listed: set[int] = set()

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
        due = now if item.available_at is None else item.available_at
        return {
            "tenant_id": tenant_id,
            "provider_id": item.provider_id,
            "recipient": recipient,
            "payload": payload,
            "idempotency_key": item.idempotency_key,
            "priority": item.priority,
            "state": _SCHEDULED if item.scheduled else _QUEUED,
            "attempt": 0,
            "failures": 0,
            "max_attempts": item.max_attempts,
            "available_at": due,
            "enqueued_at": now,
            "expires_at": item.expires_at,
        }

    # -- dispatch ---------------------------------------------------------------------------
    async def claim(
        self, tenant_id: int, provider_id: int, n: int, *, owner: str, lease_s: float, now: float
    ) -> list[Leased]:
        """Lease up to ``n`` due notifications of one pair to ``owner``, highest priority first,
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
        return await self._leases(rows, tenant_id, provider_id, owner, expires, now)

    async def _leases(
        self,
        rows: Sequence[Any],
        tenant_id: int,
        provider_id: int,
        owner: str,
        expires: float,
        now: float,
    ) -> list[Leased]:
        """A claim's rows as leases, in id order, without those whose deadline had passed (the
        claim ended them expired); with keys that cannot open a recipient the rows go back at
        once, unspent, and ``SecretUnreadable`` is raised."""
        decrypt, loads = self._box.decrypt, json.loads
        if any(row[8] is not None and row[8] <= now for row in rows):
            rows = [row for row in rows if row[8] is None or row[8] > now]
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
                    deadline,
                    due_at,
                )
                for (
                    i,
                    recipient,
                    payload,
                    key,
                    attempt,
                    failures,
                    max_attempts,
                    enqueued_at,
                    deadline,
                    due_at,
                ) in rows
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
            return [
                await self._leases(rows, t, p, owner, expires, now) for (t, p, _n), rows in pairs
            ]
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
                        # No index serves these: the rows are found by id (as the grouped
                        # acknowledgement's: completions._DELIVER).
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
            # One statement per lease owner: apply_delivered fences a batch on one owner.
            delivered: dict[str, list[Completion]] = {}
            for c in completions:
                if c.state is NotificationState.DELIVERED:
                    delivered.setdefault(c.leased.owner, []).append(c)
            for mine in delivered.values():
                for start in range(0, len(mine), _CHUNK):
                    ok |= await apply_delivered(conn, mine[start : start + _CHUNK])
            ok |= await self._apply_rest(conn, completions)
            applied = [c.leased.id in ok for c in completions]
            log_rows = [log_row(c, worker) for c in completions if c.leased.id in ok]
            if log_rows:
                await conn.execute(LOG_INSERT, log_rows)
            return applied

        if len({c.leased.id for c in completions}) != len(completions):
            raise ValueError("a batch of completions must not name a notification twice")
        if not completions:
            return []
        if all_delivered_by_one(completions):
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
            if c.state is not NotificationState.DELIVERED and await apply_one(conn, c):
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

    # -- the dispatcher's reads ------------------------------------------------------------

    async def due_pairs(
        self,
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        """Every (tenant, provider) pair with queued work, or only those of ``pairs`` that
        have some: how much is due now (counted up to ``DUE_CAP``: the dispatcher only needs
        to know there is at least a batch), when the next falls due, and its queued rows in
        the kept counts. Reads the counts (all pairs) and, per pair, at most ``DUE_CAP`` index
        entries, however deep the queue. The dispatcher asks for ``pairs`` only (those whose
        count ran out); a look at every pair is for tools and tests."""

        async def tx(conn: AsyncConnection) -> list[DuePair]:
            probed = list(pairs) if pairs is not None else None
            if probed is None:
                probed = [(t, p) for t, p, state, _n in await counts(conn) if state == _QUEUED]
            probed = [(t, p) for t, p in probed if tenant_ids is None or t in tenant_ids]
            found: list[DuePair] = []
            for start in range(0, len(probed), PAIRS_PER_QUERY):
                chunk = probed[start : start + PAIRS_PER_QUERY]
                # Padded with its last pair to one of a few sizes: each size is compiled once.
                size = next(n for n in PROBE_SIZES if n >= len(chunk))
                chunk += [chunk[-1]] * (size - len(chunk))
                params: dict[str, Any] = {"now": now}
                for i, (t, p) in enumerate(chunk):
                    params[f"t{i}"], params[f"p{i}"] = t, p
                rows = await conn.execute(due_probes(size), params)
                found.extend(
                    DuePair(r[0], r[1], int(r[2]), float(r[3]), int(r[4] or 0))
                    for r in rows
                    if r[3] is not None  # the count ran ahead of a concurrent claim
                )
            return list({(d.tenant_id, d.provider_id): d for d in found}.values())

        return await self._db.read(tx) if tenant_ids is None or tenant_ids else []

    async def queued_counts(self, share: Share | None = None) -> dict[tuple[int, int], int]:
        """Queued rows per (tenant, provider) with any, from the kept counts: one read of
        ``queue_counts`` (its rows in the queued state), however deep the queue. With
        ``share``, only the pairs of that worker's part of the tenants and the deep ones: the
        rest are never sent to it, nor read into rows."""
        query = QUEUED_COUNTS if share is None else queued_counts_of(share)

        async def tx(conn: AsyncConnection) -> dict[tuple[int, int], int]:
            return dict(await in_parts(conn, query, count_entry, raw=True))  # the loop turns

        return await self._db.read(tx)

    async def providers_with_work(self) -> dict[int, bool]:
        """Each provider with queued or leased notifications, and whether any are leased (in
        flight): read from the counts, whatever the queue holds."""

        async def tx(conn: AsyncConnection) -> dict[int, bool]:
            found: dict[int, bool] = {}
            for _t, p, state, n in await counts(conn):
                if n > 0 and state in (_QUEUED, _LEASED):
                    found[p] = found.get(p, False) or state == _LEASED
            return found

        return await self._db.read(tx)

    async def backlog(self) -> dict[tuple[int, int], int]:
        """Queued and leased notifications per (tenant, provider), from the counts."""

        async def tx(conn: AsyncConnection) -> dict[tuple[int, int], int]:
            found: dict[tuple[int, int], int] = {}
            for t, p, state, n in await counts(conn):
                if n > 0 and state in (_QUEUED, _LEASED):
                    found[t, p] = found.get((t, p), 0) + n
            return found

        return await self._db.read(tx)

    async def enqueues_since(self, since: float, limit: int) -> list[Enqueue]:
        """The notifications enqueued at or after ``since`` (unix s) that the store still
        keeps, oldest first, at most ``limit``. Ids grow with enqueue time, so the first one
        is found by a binary search over the primary key (a few dozen point reads) and the
        rest are one range of it: the cost follows the window, not the store."""
        probe = sa.select(N.c.id, N.c.enqueued_at).order_by(N.c.id).limit(1)

        async def tx(conn: AsyncConnection) -> list[Enqueue]:
            bounds = (await conn.execute(sa.select(sa.func.min(N.c.id), sa.func.max(N.c.id)))).one()
            if bounds[0] is None:
                return []
            lo, hi = int(bounds[0]), int(bounds[1]) + 1
            while lo < hi:  # the first id whose row (or the next kept one) is recent enough
                mid = (lo + hi) // 2
                row = (await conn.execute(probe.where(N.c.id >= mid))).first()
                if row is None or row.enqueued_at >= since:
                    hi = mid
                else:
                    lo = int(row.id) + 1
            query = (
                sa.select(N.c.enqueued_at, N.c.tenant_id, N.c.provider_id, N.c.priority)
                .where((N.c.id >= lo) & (N.c.enqueued_at >= since))
                .order_by(N.c.id)
                .limit(limit)
            )
            rows = [Enqueue(r[0], r[1], r[2], r[3]) for r in await conn.execute(query)]
            rows.sort(key=lambda e: e.enqueued_at)
            return rows

        return await self._db.read(tx)


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
        result = EnqueueResult(ids[key], key, not new, new and key in gone)
        if new and (item.scheduled or item.expires_at is not None):
            result.expires_at = item.expires_at
            result.send_at = item.available_at if item.scheduled else None
        results.append(result)
        fresh.discard(key)
    return results


def _unread(row: Any, tenant_id: int, provider_id: int, owner: str) -> Leased:
    """A claimed row as a lease to give back, its recipient left sealed (not needed)."""
    i, _, _, key, attempt, failures, max_attempts, enqueued_at, expires_at, due_at = row
    return Leased(
        i,
        tenant_id,
        provider_id,
        "",
        {},
        key,
        attempt,
        failures,
        max_attempts,
        enqueued_at,
        owner,
        0.0,
        expires_at,
        due_at,
    )
