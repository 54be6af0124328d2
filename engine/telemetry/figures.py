"""Rolling figures kept by the engine, handed out as immutable snapshots."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.core.circuit import Circuit
from engine.core.clock import Clock
from engine.core.domain import BucketLevel, NotificationState, Outcome
from engine.store.records import Completion, DepthRow, ProviderRecord, TenantRecord
from engine.telemetry.activity import Activity
from engine.telemetry.snapshot_view import BucketPicks, QueueTotals
from engine.telemetry.status_events import EventFigures

__all__ = [
    "DELIVERY_BOUNDS_S",
    "SEND_BOUNDS_S",
    "Counters",
    "Histogram",
    "PairCounts",
    "Snapshot",
    "Telemetry",
    "TenantDepth",
    "build_snapshot",
    "percentile",
    "summed",
    "tenant_depths",
]

_RATE_SPAN_S = 5
ACTIVITY_PAIRS = 2048  # pairs the activity record keeps (each read is bounded by this)
# Upper bounds of the cumulative histograms: a provider call (5 ms to 30 s; the send timeout
# is 60 s by default, so a call cut short lands above the last), and enqueue to delivery (50 ms
# to an hour: a backlog drained at its rate takes minutes).
SEND_BOUNDS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
DELIVERY_BOUNDS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# A row due this much later than its enqueue was scheduled (an enqueue's own time is its due).
_SCHEDULED_AFTER_S = 0.001
_OUTCOME_COUNTERS = ("delivered", "throttled", "failed", "dead", "held", "expired")


@dataclass(frozen=True, slots=True)
class TenantDepth:
    tenant: str
    queued: int
    leased: int
    delivered: int
    dead: int
    oldest_queued_age_s: float | None
    cancelled: int = 0  # last, with defaults: rows are made by position
    suppressed: int = 0
    scheduled: int = 0  # waiting for their send time
    expired: int = 0  # past their deadline before they were sent


@dataclass(frozen=True, slots=True)
class Counters:
    delivered: int = 0
    throttled: int = 0
    failed: int = 0  # transient failures that will be retried
    dead: int = 0
    takeovers: int = 0  # completions refused because the lease had moved on
    held: int = 0  # sends the provider could not take (unavailable): queued again, unspent
    reaped: int = 0
    stale_tokens: int = 0  # tokens older than ``token_lag_s`` at their send: taken again
    suppressed: int = 0  # enqueued here to a suppressed recipient: never sent
    gone: int = 0  # sends whose provider said the recipient is gone: put on the tenant's list
    claims: int = 0  # claim statements made (each may serve many keys)
    claims_empty: int = 0  # pairs granted tokens whose claim found no row (another worker's)
    # Ended expired here: past their deadline before their send (after a wait for tokens), a
    # retry that would come after it, the provider's answer, or this engine's sweep of rows
    # nobody claimed (a claim's own expiries are in the store's counts only).
    expired: int = 0
    promoted: int = 0  # scheduled rows this engine queued as they fell due
    events_delivered: int = 0  # status events this engine's courier delivered
    events_failed: int = 0  # their tries that failed (by answer: Snapshot.event_failures)


@dataclass(frozen=True, slots=True)
class PairCounts:
    """Outcomes of one (tenant, provider) written by this engine since it was made."""

    tenant: str
    provider: str
    delivered: int = 0
    throttled: int = 0
    failed: int = 0
    dead: int = 0
    held: int = 0
    expired: int = 0


@dataclass(frozen=True, slots=True)
class Histogram:
    """One provider's observations since the engine was made: ``cumulative[i]`` of them were
    at most ``bounds_s[i]`` (Prometheus' ``le`` buckets), ``count`` in all, summing ``sum_s``."""

    provider: str
    bounds_s: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    sum_s: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the console and ``omnipost stats`` show, at one instant (``ts``, unix s)."""

    ts: float
    state: str
    worker_id: str
    concurrency: int
    inflight: int
    limiter_backend: str
    buckets: tuple[BucketLevel, ...]
    depth: tuple[TenantDepth, ...]
    totals: Counters
    delivered_per_s: float
    throttled_per_s: float
    failed_per_s: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    loop_lag_s: float
    workers: tuple[str, ...] = field(default_factory=tuple)
    failure: str | None = None
    # Every provider's circuit as this engine last saw it (no store read), by provider name.
    health: tuple[Circuit, ...] = ()
    # Cumulative, for a scraper (app/metrics.py): outcomes per (tenant, provider), provider
    # call durations and enqueue-to-delivery latencies per provider.
    outcomes: tuple[PairCounts, ...] = ()
    send_durations: tuple[Histogram, ...] = ()
    delivery_latencies: tuple[Histogram, ...] = ()
    # A snapshot taken with a view (``Engine.snapshot(view=...)``): the buckets it picked
    # (``buckets`` then holds only those and the named tenants'), the queue over every tenant,
    # and the deepest tenants (``depth`` then holds those and the named ones).
    picks: BucketPicks | None = None
    queue: QueueTotals | None = None
    deepest: tuple[TenantDepth, ...] = ()
    loop_stall_max_s: float = 0.0  # the longest the loop was late since the engine was made
    # Scheduled notifications' first sends, later than their send time (the last
    # ``latency_window`` of them): p50 and p99 in seconds; None before any.
    lateness_p50_s: float | None = None
    lateness_p99_s: float | None = None
    events: EventFigures | None = None  # status events (engine/telemetry/status_events.py)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _Buckets:
    """A histogram being filled: a count per bound (not cumulative) and one above the last."""

    __slots__ = ("bounds_s", "counts", "sum_s")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)
        self.sum_s = 0.0

    def observe(self, value_s: float) -> None:
        value_s = max(0.0, value_s)  # enqueue times come from other hosts' clocks
        self.counts[bisect_left(self.bounds_s, value_s)] += 1  # a value on a bound is "le" it
        self.sum_s += value_s

    def frozen(self, provider: str) -> Histogram:
        running, cumulative = 0, []
        for n in self.counts[:-1]:
            running += n
            cumulative.append(running)
        return Histogram(provider, self.bounds_s, tuple(cumulative), sum(self.counts), self.sum_s)


class Telemetry:
    """Counts outcomes per second over a short window, and recent delivery latencies; and,
    since it was made, outcomes per (tenant, provider) and histograms per provider. Memory is
    bounded by the configured tenants and providers, never by the traffic. ``activity`` keeps
    the pairs that completed sends last (bounded by its capacity alone)."""

    def __init__(self, clock: Clock, *, latency_window: int = 4096) -> None:
        self._clock = clock
        self._totals: dict[str, int] = dict.fromkeys(Counters.__slots__, 0)
        self._per_second: deque[tuple[int, dict[Outcome, int]]] = deque(maxlen=_RATE_SPAN_S + 2)
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self._lateness: deque[float] = deque(maxlen=latency_window)
        self._pairs: dict[tuple[str, str], dict[str, int]] = {}
        # ``pair_counts``' answer, kept: the pairs that changed since are made again, only.
        self._pair_counts: dict[tuple[str, str], PairCounts] = {}
        self._pairs_changed: dict[tuple[str, str], None] = {}  # a set, in insertion order
        self._pair_tuple: tuple[PairCounts, ...] = ()
        self._sends: dict[str, _Buckets] = {}
        self._deliveries: dict[str, _Buckets] = {}
        self.loop_lag_s = 0.0
        self.loop_stall_max_s = 0.0  # the longest the loop was late since the engine was made
        # The pairs that sent last: what a view's snapshot reads (a console's distribution of
        # fills reads those that sent within burst / rate s: at 1,000/s, about a second's).
        self.activity = Activity(ACTIVITY_PAIRS)

    def record(
        self,
        outcome: Outcome,
        *,
        dead: bool = False,
        latency_s: float | None = None,
        pair: tuple[str, str] | None = None,
        expired: bool = False,
    ) -> None:
        """One completion written back; ``pair`` (tenant, provider) names, when known, is also
        counted on its own, and its provider's delivery latency histogram gets ``latency_s``."""
        second = int(self._clock.monotonic())
        per_second = self._per_second
        if not per_second or per_second[-1][0] != second:
            per_second.append((second, {}))
        counts = per_second[-1][1]
        counts[outcome] = counts.get(outcome, 0) + 1
        name = "expired" if expired else _counter(outcome, dead=dead)
        self._totals[name] += 1
        if pair is not None:
            paired = self._pairs.get(pair)
            if paired is None:
                paired = self._pairs[pair] = dict.fromkeys(_OUTCOME_COUNTERS, 0)
            paired[name] += 1
            self._pairs_changed[pair] = None
        if outcome is Outcome.DELIVERED and latency_s is not None:
            self._latencies.append(latency_s)
            if pair is not None:
                _buckets(self._deliveries, pair[1], DELIVERY_BOUNDS_S).observe(latency_s)

    def completed(
        self,
        completion: Completion,
        tenants: Mapping[int, TenantRecord],
        providers: Mapping[int, ProviderRecord],
    ) -> None:
        """``completion`` was written back: ``record`` it, its tenant and provider named from
        ``tenants`` and ``providers`` (by id when one has gone meanwhile)."""
        leased = completion.leased
        tenant, provider = tenants.get(leased.tenant_id), providers.get(leased.provider_id)
        pair = (
            tenant.name if tenant is not None else str(leased.tenant_id),
            provider.name if provider is not None else str(leased.provider_id),
        )
        # A scheduled notification's first send (due later than it was enqueued): how late.
        due_at, send_s = leased.due_at, completion.send_s
        if (
            send_s is not None
            and due_at is not None
            and leased.attempt == 1
            and due_at > leased.enqueued_at + _SCHEDULED_AFTER_S
        ):
            self._lateness.append(max(0.0, completion.ts - send_s - due_at))
        state = completion.state
        dead = state is NotificationState.DEAD
        expired = state is NotificationState.EXPIRED
        self.record(
            completion.outcome,
            dead=dead,
            latency_s=completion.latency_s,
            pair=pair,
            expired=expired,
        )
        self.activity.touch(pair[0], pair[1], self._clock.monotonic())

    def observe_send(self, provider: str, duration_s: float) -> None:
        """One provider call took ``duration_s``, whatever its outcome."""
        _buckets(self._sends, provider, SEND_BOUNDS_S).observe(duration_s)

    def count(self, name: str, n: int = 1) -> None:
        self._totals[name] += n

    def totals(self) -> Counters:
        return Counters(**self._totals)

    def pair_counts(self) -> tuple[PairCounts, ...]:
        """Outcomes per (tenant, provider) so far, in the order the pairs first completed a
        send. Only the pairs that changed since the last call are made again: a call costs
        what was sent meanwhile, not the pairs (10,000 tenants, three providers each)."""
        changed = self._pairs_changed
        if changed:
            made = self._pair_counts
            for pair in changed:
                made[pair] = PairCounts(pair[0], pair[1], **self._pairs[pair])
            changed.clear()
            self._pair_tuple = tuple(made.values())
        return self._pair_tuple

    def send_durations(self) -> tuple[Histogram, ...]:
        return tuple(b.frozen(p) for p, b in sorted(self._sends.items()))

    def delivery_latencies(self) -> tuple[Histogram, ...]:
        return tuple(b.frozen(p) for p, b in sorted(self._deliveries.items()))

    def rate_per_s(self, *outcomes: Outcome) -> float:
        """Mean per second over the last few whole seconds."""
        now = int(self._clock.monotonic())
        total = sum(
            counts.get(o, 0)
            for second, counts in self._per_second
            if now - _RATE_SPAN_S <= second < now
            for o in outcomes
        )
        return total / _RATE_SPAN_S

    def lateness_percentiles(self) -> tuple[float | None, float | None]:
        """p50 and p99 of how late scheduled notifications' first sends were."""
        values = sorted(self._lateness)
        return percentile(values, 50), percentile(values, 99)

    def latency_percentiles(self) -> tuple[float | None, float | None, float | None]:
        values = sorted(self._latencies)
        return percentile(values, 50), percentile(values, 95), percentile(values, 99)

    def __repr__(self) -> str:
        return f"Telemetry({self.totals()})"


def _counter(outcome: Outcome, *, dead: bool) -> str:
    """Which of ``Counters``' outcome fields a completion adds to."""
    if outcome is Outcome.DELIVERED:
        return "delivered"
    if outcome is Outcome.THROTTLED:
        return "throttled"
    if outcome is Outcome.UNAVAILABLE:
        return "held"  # by the provider's circuit: no attempt spent, never dead for it
    return "dead" if dead else "failed"


def _buckets(table: dict[str, _Buckets], provider: str, bounds_s: tuple[float, ...]) -> _Buckets:
    found = table.get(provider)
    if found is None:
        found = table[provider] = _Buckets(bounds_s)
    return found


def tenant_depths(
    rows: Iterable[DepthRow], names: Mapping[int, str], now: float
) -> tuple[TenantDepth, ...]:
    """The store's depth rows gathered per tenant, in tenant id order; only tenants with a row
    appear, a state without one counts 0, and a tenant missing from ``names`` is shown by its
    id. The oldest queued notification's age is taken at ``now`` (unix s), never below 0."""
    per: dict[int, dict[NotificationState, int]] = {}
    oldest: dict[int, float | None] = {}
    for row in rows:
        per.setdefault(row.tenant_id, {})[row.state] = row.count
        oldest.setdefault(row.tenant_id, None)
        if row.state is NotificationState.QUEUED and row.oldest_enqueued_at is not None:
            oldest[row.tenant_id] = max(0.0, now - row.oldest_enqueued_at)
    return tuple(
        TenantDepth(
            tenant=names.get(tenant_id, str(tenant_id)),
            queued=counts.get(NotificationState.QUEUED, 0),
            leased=counts.get(NotificationState.LEASED, 0),
            delivered=counts.get(NotificationState.DELIVERED, 0),
            dead=counts.get(NotificationState.DEAD, 0),
            oldest_queued_age_s=oldest[tenant_id],
            cancelled=counts.get(NotificationState.CANCELLED, 0),
            suppressed=counts.get(NotificationState.SUPPRESSED, 0),
            scheduled=counts.get(NotificationState.SCHEDULED, 0),
            expired=counts.get(NotificationState.EXPIRED, 0),
        )
        for tenant_id, counts in sorted(per.items())
    )


def build_snapshot(
    *,
    now: float,
    depth_rows: Iterable[DepthRow],
    tenant_names: Mapping[int, str],
    telemetry: Telemetry,
    buckets: Iterable[BucketLevel],
    state: str,
    worker_id: str,
    concurrency: int,
    inflight: int,
    limiter_backend: str,
    workers: Iterable[str] = (),
    failure: str | None = None,
    health: Iterable[Circuit] = (),
    picks: BucketPicks | None = None,
    queue: QueueTotals | None = None,
    deepest: tuple[TenantDepth, ...] = (),
) -> Snapshot:
    """One engine's figures at ``now`` (unix s): the queue from the store's depth rows (see
    ``tenant_depths``), rates and latencies from ``telemetry`` as its clock reads now, and the
    rest as given. Reads nothing else. Without ``queue`` (a snapshot of every tenant) the
    totals are summed from the depth rows."""
    p50, p95, p99 = telemetry.latency_percentiles()
    late_p50, late_p99 = telemetry.lateness_percentiles()
    depth = tenant_depths(depth_rows, tenant_names, now)
    return Snapshot(
        ts=now,
        state=state,
        worker_id=worker_id,
        concurrency=concurrency,
        inflight=inflight,
        limiter_backend=limiter_backend,
        buckets=tuple(buckets),
        depth=depth,
        totals=telemetry.totals(),
        delivered_per_s=telemetry.rate_per_s(Outcome.DELIVERED),
        throttled_per_s=telemetry.rate_per_s(Outcome.THROTTLED),
        failed_per_s=telemetry.rate_per_s(Outcome.TRANSIENT, Outcome.PERMANENT),
        latency_p50_s=p50,
        latency_p95_s=p95,
        latency_p99_s=p99,
        loop_lag_s=telemetry.loop_lag_s,
        loop_stall_max_s=telemetry.loop_stall_max_s,
        lateness_p50_s=late_p50,
        lateness_p99_s=late_p99,
        workers=tuple(workers),
        failure=failure,
        health=tuple(health),
        outcomes=telemetry.pair_counts(),
        send_durations=telemetry.send_durations(),
        delivery_latencies=telemetry.delivery_latencies(),
        picks=picks,
        queue=queue if queue is not None else summed(depth, now),
        deepest=deepest,
    )


def summed(depth: Iterable[TenantDepth], now: float) -> QueueTotals:
    """The totals of ``depth`` rows (every tenant's, for a full snapshot), read at ``now``."""
    rows = list(depth)
    ages = [d.oldest_queued_age_s for d in rows if d.oldest_queued_age_s is not None]
    return QueueTotals(
        queued=sum(d.queued for d in rows),
        leased=sum(d.leased for d in rows),
        delivered=sum(d.delivered for d in rows),
        dead=sum(d.dead for d in rows),
        cancelled=sum(d.cancelled for d in rows),
        suppressed=sum(d.suppressed for d in rows),
        scheduled=sum(d.scheduled for d in rows),
        expired=sum(d.expired for d in rows),
        tenants_queued=sum(1 for d in rows if d.queued),
        oldest_queued_age_s=max(ages, default=None),
        read_at=now,
    )
