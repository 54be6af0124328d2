"""Rolling figures kept by the engine, handed out as immutable snapshots."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.clock import Clock
from engine.domain import BucketLevel, NotificationState, Outcome
from engine.store.records import DepthRow

__all__ = [
    "Counters",
    "Snapshot",
    "Telemetry",
    "TenantDepth",
    "build_snapshot",
    "percentile",
    "tenant_depths",
]

_RATE_SPAN_S = 5


@dataclass(frozen=True, slots=True)
class TenantDepth:
    tenant: str
    queued: int
    leased: int
    delivered: int
    dead: int
    oldest_queued_age_s: float | None


@dataclass(frozen=True, slots=True)
class Counters:
    delivered: int = 0
    throttled: int = 0
    failed: int = 0  # transient failures that will be retried
    dead: int = 0
    takeovers: int = 0  # completions refused because the lease had moved on
    reaped: int = 0


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


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class Telemetry:
    """Counts outcomes per second over a short window, and recent delivery latencies."""

    def __init__(self, clock: Clock, *, latency_window: int = 4096) -> None:
        self._clock = clock
        self._totals: dict[str, int] = dict.fromkeys(Counters.__slots__, 0)
        self._per_second: deque[tuple[int, dict[Outcome, int]]] = deque(maxlen=_RATE_SPAN_S + 2)
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self.loop_lag_s = 0.0

    def record(
        self, outcome: Outcome, *, dead: bool = False, latency_s: float | None = None
    ) -> None:
        second = int(self._clock.monotonic())
        if not self._per_second or self._per_second[-1][0] != second:
            self._per_second.append((second, {}))
        counts = self._per_second[-1][1]
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome is Outcome.DELIVERED:
            self._totals["delivered"] += 1
            if latency_s is not None:
                self._latencies.append(latency_s)
        elif outcome is Outcome.THROTTLED:
            self._totals["throttled"] += 1
        elif dead:
            self._totals["dead"] += 1
        else:
            self._totals["failed"] += 1

    def count(self, name: str, n: int = 1) -> None:
        self._totals[name] += n

    def totals(self) -> Counters:
        return Counters(**self._totals)

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

    def latency_percentiles(self) -> tuple[float | None, float | None, float | None]:
        values = sorted(self._latencies)
        return percentile(values, 50), percentile(values, 95), percentile(values, 99)

    def __repr__(self) -> str:
        return f"Telemetry({self.totals()})"


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
) -> Snapshot:
    """One engine's figures at ``now`` (unix s): the queue from the store's depth rows (see
    ``tenant_depths``), rates and latencies from ``telemetry`` as its clock reads now, and the
    rest as given. Reads nothing else."""
    p50, p95, p99 = telemetry.latency_percentiles()
    return Snapshot(
        ts=now,
        state=state,
        worker_id=worker_id,
        concurrency=concurrency,
        inflight=inflight,
        limiter_backend=limiter_backend,
        buckets=tuple(buckets),
        depth=tenant_depths(depth_rows, tenant_names, now),
        totals=telemetry.totals(),
        delivered_per_s=telemetry.rate_per_s(Outcome.DELIVERED),
        throttled_per_s=telemetry.rate_per_s(Outcome.THROTTLED),
        failed_per_s=telemetry.rate_per_s(Outcome.TRANSIENT, Outcome.PERMANENT),
        latency_p50_s=p50,
        latency_p95_s=p95,
        latency_p99_s=p99,
        loop_lag_s=telemetry.loop_lag_s,
        workers=tuple(workers),
        failure=failure,
    )
