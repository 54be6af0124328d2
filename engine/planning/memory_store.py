"""The planner's store: the queue, circuits and configuration the dispatcher uses, in memory.

It keeps the SQL store's rules where the dispatcher can see them: a claim leases due rows of
one pair highest priority first, then oldest, and bumps the attempt; completions and releases
apply only while the lease holds (same owner and attempt); a retry waits until its
``available_at``; a claim ends a row past its deadline expired instead of leasing it (so rows
expire when claimed, where the store's sweep expires those nobody claims at their deadline: the
same rows, a little later); ``due_pairs`` counts due rows up to ``DUE_CAP``. It also tells a
``PlanLedger`` what happened to every notification, which is what a plan reports.
Everything here answers at once: a plan runs at the speed of the dispatcher's own code.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engine.core.circuit import CircuitRecord, closed
from engine.core.domain import BucketKey, Limit, NotificationState, Outcome
from engine.store.circuits import Transition
from engine.store.counts import DUE_CAP
from engine.store.records import (
    Completion,
    DuePair,
    Leased,
    PairLimit,
    ProviderRecord,
    Share,
    TenantRecord,
)

__all__ = ["MemoryCircuits", "MemoryConfig", "MemoryQueue", "PlanLedger", "PlanStore"]

Pair = tuple[int, int]  # (tenant id, provider id)
# A due row's place in its pair's heap, one int: ``row id - priority * _ID_SPAN`` orders as
# ``(-priority, row id)`` (ids stay below the span) and compares in C as one number, where a
# tuple compares item by item: a claim pops one each time.
_ID_SPAN = 1 << 40
_QUEUED, _LEASED = NotificationState.QUEUED, NotificationState.LEASED


class _Row:
    __slots__ = (
        "attempt",
        "available_at",
        "enqueued_at",
        "expires_at",
        "failures",
        "id",
        "owner",
        "priority",
        "provider_id",
        "state",
        "tenant_id",
    )

    def __init__(
        self, id_: int, tenant_id: int, provider_id: int, priority: int, now: float
    ) -> None:
        self.id = id_
        self.tenant_id = tenant_id
        self.provider_id = provider_id
        self.priority = priority
        self.available_at = now
        self.enqueued_at = now
        self.expires_at: float | None = None
        self.attempt = 0
        self.failures = 0
        self.state = _QUEUED
        self.owner: str | None = None


@dataclass
class TenantTally:
    """One tenant's notifications in a plan: counts, waits of the delivered ones, and its
    depth (enqueued, not yet delivered or dead) each time it changed."""

    enqueued: int = 0
    delivered: int = 0
    dead: int = 0
    expired: int = 0  # past their deadline before they were sent
    sends: int = 0
    last_finished_at: float | None = None
    waits: list[float] = field(default_factory=list)
    depth: int = 0
    max_depth: int = 0
    series: list[tuple[float, int]] = field(default_factory=list)

    def moved(self, now: float, by: int) -> None:
        self.depth += by
        depth, most = self.depth, self.max_depth  # ``max()``, without the call: once per send
        self.max_depth = depth if depth > most else most
        if self.series and self.series[-1][0] == now:
            self.series[-1] = (now, self.depth)
        else:
            self.series.append((now, self.depth))


@dataclass
class ProviderTally:
    sends: int = 0
    outcomes: dict[Outcome, int] = field(default_factory=dict)
    first_send_at: float | None = None
    last_send_at: float | None = None


class PlanLedger:
    """What happened in a plan, per tenant and provider; ``done`` is set once everything fed
    has been delivered or is dead."""

    def __init__(self) -> None:
        self.tenants: dict[int, TenantTally] = {}
        self.providers: dict[int, ProviderTally] = {}
        self.outstanding = 0
        self.fed_all = False
        self.done = asyncio.Event()

    def tenant(self, tenant_id: int) -> TenantTally:
        tally = self.tenants.get(tenant_id)
        if tally is None:
            tally = self.tenants[tenant_id] = TenantTally()
        return tally

    def enqueued(self, tenant_id: int, n: int, now: float) -> None:
        tally = self.tenant(tenant_id)
        tally.enqueued += n
        tally.moved(now, n)
        self.outstanding += n

    def feeding_ended(self) -> None:
        self.fed_all = True
        self._check()

    def sent(self, c: Completion) -> None:
        """One send's outcome, as the delivery log would record it (a notification past its
        deadline before its send was not sent)."""
        if c.send_s is None and c.outcome is Outcome.EXPIRED:
            return
        tally = self.providers.get(c.leased.provider_id)
        if tally is None:
            tally = self.providers[c.leased.provider_id] = ProviderTally()
        tally.sends += 1
        tally.outcomes[c.outcome] = tally.outcomes.get(c.outcome, 0) + 1
        if tally.first_send_at is None:
            tally.first_send_at = c.ts
        tally.last_send_at = c.ts
        self.tenants[c.leased.tenant_id].sends += 1  # its tally is made when it is enqueued

    def finished(self, tenant_id: int, c: Completion) -> None:
        tally = self.tenants[tenant_id]
        if c.state is NotificationState.DELIVERED:
            tally.delivered += 1
            tally.waits.append(c.ts - c.leased.enqueued_at)
        elif c.state is NotificationState.EXPIRED:
            tally.expired += 1
        else:
            tally.dead += 1
        tally.last_finished_at = c.ts
        tally.moved(c.ts, -1)
        self.outstanding -= 1
        if self.fed_all and not self.outstanding:  # ``_check()``, written out: once per send
            self.done.set()

    def expired(self, tenant_id: int, now: float) -> None:
        """One notification a claim found past its deadline: finished, never sent."""
        tally = self.tenants[tenant_id]
        tally.expired += 1
        tally.last_finished_at = now
        tally.moved(now, -1)
        self.outstanding -= 1
        self._check()

    def _check(self) -> None:
        if self.fed_all and self.outstanding == 0:
            self.done.set()


class MemoryQueue:
    """The ``DispatchQueue`` of engine/dispatch/ports.py, in memory (one event loop, not
    thread-safe)."""

    def __init__(self, ledger: PlanLedger, *, max_attempts: int) -> None:
        self._ledger = ledger
        self._max_attempts = max_attempts
        self._rows: dict[int, _Row] = {}  # queued and leased ones; finished ones are dropped
        self._due: dict[Pair, list[int]] = {}  # heap of places (see ``_ID_SPAN``), due now
        self._later: dict[Pair, list[tuple[float, int]]] = {}  # heap of (available_at, id)
        self._queued: dict[Pair, int] = {}
        self._next_id = 1

    def add(
        self,
        tenant_id: int,
        provider_id: int,
        n: int,
        *,
        now: float,
        priority: int = 0,
        ttl_s: float | None = None,
    ) -> None:
        """Enqueue ``n`` notifications of one pair, due at once; with ``ttl_s``, each is never
        sent later than that after ``now``."""
        pair = (tenant_id, provider_id)
        due = self._due.setdefault(pair, [])
        first = self._next_id
        self._next_id += max(n, 0)
        rows = self._rows
        for row_id in range(first, self._next_id):
            rows[row_id] = _Row(row_id, tenant_id, provider_id, priority, now)
        if ttl_s is not None:
            for row_id in range(first, self._next_id):
                rows[row_id].expires_at = now + ttl_s
        entries = [row_id - priority * _ID_SPAN for row_id in range(first, self._next_id)]
        if not due:
            due.extend(entries)  # ascending: already the heap the pushes would have built
        else:
            for entry in entries:
                heapq.heappush(due, entry)
        self._queued[pair] = self._queued.get(pair, 0) + n
        self._ledger.enqueued(tenant_id, n, now)

    def _promote(self, pair: Pair, now: float) -> None:
        later = self._later.get(pair)
        if not later:
            return
        due = self._due.setdefault(pair, [])
        while later and later[0][0] <= now:
            _, row_id = heapq.heappop(later)
            row = self._rows[row_id]
            heapq.heappush(due, row_id - row.priority * _ID_SPAN)

    async def due_pairs(
        self,
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        wanted = None if tenant_ids is None else set(tenant_ids)
        only = None if pairs is None else set(pairs)
        found = []
        for pair, queued in self._queued.items():
            if queued <= 0 or (wanted is not None and pair[0] not in wanted):
                continue
            if only is not None and pair not in only:
                continue
            self._promote(pair, now)
            due = min(len(self._due.get(pair, ())), DUE_CAP)
            later = self._later.get(pair)
            next_at = now if due or not later else later[0][0]
            found.append(DuePair(pair[0], pair[1], due, next_at, queued))
        return found

    async def queued_counts(self, share: Share | None = None) -> dict[Pair, int]:
        """The kept counts; a plan's one dispatcher never asks for a ``share``."""
        assert share is None, "a plan has one worker"
        return {pair: n for pair, n in self._queued.items() if n > 0}

    async def claim_many(
        self, asks: Sequence[tuple[int, int, int]], *, owner: str, lease_s: float, now: float
    ) -> list[list[Leased]]:
        return [
            await self.claim(t, p, n, owner=owner, lease_s=lease_s, now=now) for t, p, n in asks
        ]

    async def claim(
        self, tenant_id: int, provider_id: int, n: int, *, owner: str, lease_s: float, now: float
    ) -> list[Leased]:
        pair = (tenant_id, provider_id)
        if self._later.get(pair):
            self._promote(pair, now)
        due = self._due.get(pair)
        leased: list[Leased] = []
        rows, max_attempts, expires_at = self._rows, self._max_attempts, now + lease_s
        taken = 0  # as the store's claim: a row found past its deadline is one of the ``n``
        while due and taken < n:
            row_id = heapq.heappop(due) % _ID_SPAN
            row = rows[row_id]
            taken += 1
            if row.expires_at is not None and row.expires_at <= now:
                del rows[row_id]
                self._queued[pair] -= 1
                self._ledger.expired(tenant_id, now)
                continue
            row.state = _LEASED
            row.owner = owner
            row.attempt += 1
            leased.append(
                Leased(  # by position: id, tenant_id, provider_id, recipient, payload,
                    row_id,  # idempotency_key, attempt, failures, max_attempts, enqueued_at,
                    tenant_id,  # owner, lease_expires_at, expires_at, due_at
                    provider_id,
                    "",
                    {},
                    f"plan-{row_id}",
                    row.attempt,
                    row.failures,
                    max_attempts,
                    row.enqueued_at,
                    owner,
                    expires_at,
                    row.expires_at,
                    row.available_at,
                )
            )
        self._queued[pair] -= len(leased)
        if len(leased) > 1:
            leased.sort(key=lambda item: item.id)
        return leased

    def _holds(self, item: Leased, owner: str) -> _Row | None:
        row = self._rows.get(item.id)
        if row is None or row.state is not _LEASED:
            return None
        return row if row.owner == owner and row.attempt == item.attempt else None

    async def release(self, owner: str, leased: Sequence[Leased]) -> int:
        count = 0
        for item in leased:
            row = self._holds(item, owner)
            if row is not None:
                self._requeue(row, row.available_at)
                count += 1
        return count

    def _requeue(self, row: _Row, available_at: float) -> None:
        pair = (row.tenant_id, row.provider_id)
        row.state = _QUEUED
        row.owner = None
        row.available_at = available_at
        heapq.heappush(self._later.setdefault(pair, []), (available_at, row.id))
        self._queued[pair] += 1

    async def complete(self, completions: Sequence[Completion], *, worker: str) -> list[bool]:
        applied = []
        rows = self._rows
        for c in completions:
            item = c.leased  # ``_holds(item, item.owner)``, written out: once per send
            row = rows.get(item.id)
            held = (
                row is not None
                and row.state is _LEASED
                and row.owner == item.owner
                and row.attempt == item.attempt
            )
            applied.append(held)
            if row is None or not held:
                continue
            self._ledger.sent(c)
            if c.state is _QUEUED:
                row.failures += 1 if c.spend_attempt else 0
                self._requeue(row, c.available_at if c.available_at is not None else c.ts)
            else:
                del self._rows[row.id]
                self._ledger.finished(row.tenant_id, c)
        return applied

    def __repr__(self) -> str:
        queued = sum(self._queued.values())
        return f"MemoryQueue(queued={queued}, kept={len(self._rows)})"


class MemoryCircuits:
    """The ``CircuitBook``: every provider's circuit, closed until a transition opens it."""

    def __init__(self, names: Mapping[int, str]) -> None:
        self._names = dict(names)
        self._health: dict[int, CircuitRecord] = {}

    async def all(self) -> dict[int, CircuitRecord]:
        return {pid: self._health.get(pid) or closed(name) for pid, name in self._names.items()}

    async def change(
        self,
        provider_id: int,
        transition: Transition,
        *,
        now: float,
        audit: tuple[str, str] | None = None,
    ) -> tuple[CircuitRecord, bool]:
        before = self._health.get(provider_id) or closed(self._names[provider_id])
        after = transition(before)
        if after is None:
            return before, False
        self._health[provider_id] = after
        return after, True


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """The ``SendConfig``: fixed tenants, providers and pair limits."""

    tenant_list: tuple[TenantRecord, ...]
    provider_list: tuple[ProviderRecord, ...]
    pair_list: tuple[PairLimit, ...]

    async def tenants(self) -> list[TenantRecord]:
        return list(self.tenant_list)

    async def providers(self, *, with_secrets: bool = False) -> list[ProviderRecord]:
        return list(self.provider_list)

    async def pair_limits(self) -> list[PairLimit]:
        return list(self.pair_list)

    async def pair_limit_keys(self) -> list[tuple[BucketKey, Limit]]:
        return [(BucketKey.for_pair(p.tenant, p.provider), p.limit) for p in self.pair_list]


class PlanStore:
    """A ``DispatchStore`` and ``ConfigSource`` in memory."""

    def __init__(self, config: MemoryConfig, ledger: PlanLedger, *, max_attempts: int) -> None:
        self.config = config
        self.queue = MemoryQueue(ledger, max_attempts=max_attempts)
        self.circuits = MemoryCircuits({p.id: p.name for p in config.provider_list})

    def __repr__(self) -> str:
        return f"PlanStore({self.queue!r})"
