"""The burst simulator's bookkeeping, without Qt: the drain time the configured buckets predict,
and one burst's progress from its first enqueue until its last notification left the queue.

The bridge runs the burst on the engine and tells a ``BurstTracker`` what happened and when;
the tracker answers with the status to show. Time is passed in: ``now_s`` is monotonic seconds
(elapsed time on the operator's watch), ``wall_s`` and a snapshot's ``ts`` are the engine
clock's unix seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from engine import BucketKey, Limit, OmniPostError, Pattern, TenantDepth, predicted_drain_s

__all__ = ["BurstTracker", "DrainForecast", "SimulationStatus", "predict_drain"]


@dataclass(frozen=True, slots=True)
class DrainForecast:
    seconds: float
    bottleneck: str  # which bucket sets the pace, for people


@dataclass(frozen=True, slots=True)
class SimulationStatus:
    tenants: tuple[str, ...]
    provider: str
    total: int
    enqueued: int = 0
    elapsed_s: float = 0.0
    forecast: DrainForecast | None = None
    actual_s: float | None = None  # set once every notification of the burst left the queue
    enqueuing: bool = True
    stopped: bool = False  # stopped by the operator before it finished

    @property
    def done(self) -> bool:
        return self.stopped or self.actual_s is not None


def predict_drain(
    tenants: Sequence[str],
    provider: str,
    count: int,
    arrival_s: float,
    limits: Mapping[BucketKey, Limit],
) -> DrainForecast:
    """Seconds from the start of a burst of ``count`` per tenant until its last notification
    may be sent, by the configured buckets alone (full at the start; latency and concurrency
    not counted). A bucket missing from ``limits`` is unlimited."""
    best = DrainForecast(arrival_s, "arrivals" if arrival_s > 0 else "nothing: no limits")
    candidates = [(BucketKey.for_provider(provider), count * len(tenants))]
    for tenant in tenants:
        candidates += [(BucketKey.for_tenant(tenant), count)]
        candidates += [(BucketKey.for_pair(tenant, provider), count)]
    for key, n in candidates:
        limit = limits.get(key)
        if limit is None:
            continue
        seconds = predicted_drain_s(n, limit.rate_per_s, limit.burst, arrival_s)
        if seconds > best.seconds:
            name = str(key).replace(":", " ")
            best = DrainForecast(seconds, f"{name} at {limit.rate_per_s:g}/s")
    return best


class BurstTracker:
    """The status of the latest burst. Each event returns the status to show next, or None
    when there is none (no burst yet, or the event does not apply to it)."""

    def __init__(self) -> None:
        self.status: SimulationStatus | None = None
        self._started_s = 0.0  # monotonic
        # Wall time the burst's last enqueue was written: until then no snapshot can show
        # the burst drained.
        self._enqueued_at = math.inf

    def begin(
        self,
        tenants: Sequence[str],
        provider: str,
        count: int,
        *,
        pattern: Pattern | str,
        duration_s: float,
        limits: Mapping[BucketKey, Limit],
        now_s: float,
    ) -> SimulationStatus:
        """A new burst of ``count`` per tenant, with its forecast; raises ``OmniPostError``
        without tenants."""
        if not tenants:
            raise OmniPostError("choose at least one tenant for the burst.")
        arrival_s = 0.0 if Pattern(pattern) is Pattern.SPIKE else duration_s
        forecast = predict_drain(tenants, provider, count, arrival_s, limits)
        self._started_s = now_s
        self._enqueued_at = math.inf
        self.status = SimulationStatus(
            tuple(tenants), provider, count * len(tenants), forecast=forecast
        )
        return self.status

    def progress(self, enqueued: int, elapsed_s: float) -> SimulationStatus | None:
        """The engine wrote ``enqueued`` notifications of the burst so far."""
        if self.status is not None:
            self.status = replace(self.status, enqueued=enqueued, elapsed_s=elapsed_s)
        return self.status

    def enqueued(self, wall_s: float) -> SimulationStatus | None:
        """Every notification of the burst was written, at ``wall_s``."""
        if self.status is not None:
            self._enqueued_at = wall_s
            self.status = replace(self.status, enqueuing=False, enqueued=self.status.total)
        return self.status

    def stopped(self) -> SimulationStatus | None:
        """Enqueueing ended early: the operator stopped it, or it failed."""
        if self.status is not None:
            self.status = replace(self.status, enqueuing=False, stopped=True)
        return self.status

    def observe(
        self, ts: float, depth: Iterable[TenantDepth], now_s: float
    ) -> SimulationStatus | None:
        """A snapshot taken at ``ts`` showed the queues' ``depth``: the burst's elapsed time,
        and its actual drain time once nothing of its tenants waits. None once it is done."""
        status = self.status
        if status is None or status.done:
            return None
        elapsed_s = now_s - self._started_s
        waiting = sum(d.queued + d.leased for d in depth if d.tenant in status.tenants)
        # A snapshot taken before the last enqueue would show nothing waiting yet: only a
        # later one can say the burst drained.
        drained = not status.enqueuing and waiting == 0 and ts >= self._enqueued_at
        actual_s = elapsed_s if drained else None
        self.status = replace(status, elapsed_s=elapsed_s, actual_s=actual_s)
        return self.status

    def __repr__(self) -> str:
        return f"BurstTracker({self.status!r})"
