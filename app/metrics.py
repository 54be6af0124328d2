"""A Prometheus endpoint: ``omnipost worker --metrics-port PORT`` (and the console).

The figures are the engine's ``Snapshot`` through ``METRICS_VIEW``, taken on the event loop
about once a second and kept whole: a cost that does not grow with the tenants (the queue's
totals per state, the deepest tenants' queues and the buckets that sent lately, not every
tenant's and every bucket's); the HTTP server, on its own thread
(``prometheus_client.start_http_server``), turns the latest one into metric families on each
scrape. So a scrape never touches the loop, the store or the limiter, and a slow or frequent
scraper costs the engine nothing.

Everything is on a registry of its own, holding this one collector: no process or platform
collectors, whose figures (CPU, memory, file descriptors) node_exporter or the service
manager already give, and which would double on a host running several workers. Labels carry
tenant, provider and bucket names only; recipients, payloads, secrets and store URLs never
reach a snapshot, so they cannot reach a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Self
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from app.metrics_address import DEFAULT_HOST, PORT_ENV, MetricsAddress, metrics_address, parse_port
from app.metrics_events import event_families
from engine import CircuitState, EngineState, OmniPostError, Snapshot, SnapshotView

__all__ = [
    "DEFAULT_HOST",
    "METRICS_VIEW",
    "OTHERS",
    "PAIRS_SHOWN",
    "PORT_ENV",
    "MetricsAddress",
    "MetricsExporter",
    "SnapshotCollector",
    "families",
    "metrics_address",
    "parse_port",
]

log = logging.getLogger(__name__)

_REFRESH_S = 1.0

SnapshotSource = Callable[[], Awaitable[Snapshot]]

# What a scrape shows: the store-wide totals per state (read every 5 s), the 20 deepest
# tenants' queues, and the emptiest and busiest 16 buckets among those taken from lately.
METRICS_VIEW = SnapshotView(
    emptiest=16, busiest=16, matched=0, deepest=20, totals_every_s=5.0, events=True
)


# -- from a snapshot to metric families --------------------------------------------------------

_OUTCOMES = ("delivered", "throttled", "failed", "dead", "held")
_OUTCOME_HELP = {
    "delivered": "Notifications the provider accepted",
    "throttled": "Sends the provider refused for its rate (429), queued again unspent",
    "failed": "Sends that failed and will be tried again",
    "dead": "Notifications given up on (a permanent failure, or out of attempts)",
    "held": "Sends the provider could not take (unavailable), queued again unspent by its circuit",
}
_DEPTH_STATES = (
    "queued",
    "scheduled",
    "leased",
    "delivered",
    "dead",
    "cancelled",
    "suppressed",
    "expired",
)
# Pairs with series of their own: the first to send since the worker started (a fixed set once
# full, so no series comes and goes); every later pair is summed per provider under OTHERS, a
# name no tenant can have. A scrape stays a few thousand series at any number of tenants.
PAIRS_SHOWN = 1000
OTHERS = "(others)"


def families(snap: Snapshot, now: float) -> list[Metric]:
    """The metric families of ``snap``, seen at ``now`` (unix s). Pure: the scrape's work."""
    return [
        *_outcomes(snap),
        *_queue(snap),
        *_lateness(snap),
        *_buckets(snap),
        *_histograms(snap),
        *_health(snap),
        *_worker(snap, now),
        *event_families(snap),
    ]


def _outcomes(snap: Snapshot) -> Iterator[Metric]:
    shown = snap.outcomes[:PAIRS_SHOWN]
    others: dict[str, dict[str, int]] = {}
    for pair in snap.outcomes[PAIRS_SHOWN:]:
        sums = others.setdefault(pair.provider, dict.fromkeys(_OUTCOMES, 0))
        for outcome in _OUTCOMES:
            sums[outcome] += getattr(pair, outcome)
    for outcome in _OUTCOMES:
        family = CounterMetricFamily(
            f"omnipost_notifications_{outcome}",
            f"{_OUTCOME_HELP[outcome]} (written back by this worker since it started; "
            f"tenant {OTHERS}: the pairs past the first {PAIRS_SHOWN} to send, summed).",
            labels=["tenant", "provider"],
        )
        for pair in shown:
            family.add_metric([pair.tenant, pair.provider], getattr(pair, outcome))
        for provider, sums in sorted(others.items()):
            family.add_metric([OTHERS, provider], sums[outcome])
        yield family
    takeovers = CounterMetricFamily(
        "omnipost_lease_takeovers",
        "Outcomes refused because the lease had expired and been taken over meanwhile.",
        value=snap.totals.takeovers,
    )
    reaped = CounterMetricFamily(
        "omnipost_leases_reaped",
        "Expired leases (of any worker) this worker returned to the queue.",
        value=snap.totals.reaped,
    )
    stale = CounterMetricFamily(
        "omnipost_stale_tokens",
        "Tokens taken again because the process was held up too long before their send.",
        value=snap.totals.stale_tokens,
    )
    suppressed = CounterMetricFamily(
        "omnipost_notifications_suppressed",
        "Notifications enqueued through this process to a recipient on its tenant's "
        "suppression list: finished without being sent.",
        value=snap.totals.suppressed,
    )
    gone = CounterMetricFamily(
        "omnipost_recipients_gone",
        "Sends whose provider answered that the recipient is gone for good (an unregistered "
        "device, a number that replied STOP): the recipient went on the tenant's suppression list.",
        value=snap.totals.gone,
    )
    expired = CounterMetricFamily(
        "omnipost_notifications_expired",
        "Notifications this worker ended expired, never sent: past their deadline before "
        "their send, a retry that would come after it, the provider's answer, or its sweep of "
        "rows nobody claimed (those a claim finds expired are in omnipost_queue_notifications).",
        value=snap.totals.expired,
    )
    promoted = CounterMetricFamily(
        "omnipost_notifications_promoted",
        "Scheduled notifications this worker queued as their send time came.",
        value=snap.totals.promoted,
    )
    yield from (takeovers, reaped, stale, suppressed, gone, expired, promoted)


def _lateness(snap: Snapshot) -> Iterator[Metric]:
    """How late scheduled notifications' first sends were, once there were some."""
    if snap.lateness_p50_s is None or snap.lateness_p99_s is None:
        return
    late = GaugeMetricFamily(
        "omnipost_scheduled_lateness_seconds",
        "How much later than their send time scheduled notifications were first sent, over the "
        "last ones this worker sent (p50 and p99).",
        labels=["quantile"],
    )
    late.add_metric(["0.5"], snap.lateness_p50_s)
    late.add_metric(["0.99"], snap.lateness_p99_s)
    yield late


def _queue(snap: Snapshot) -> Iterator[Metric]:
    if snap.queue is not None:
        totals = GaugeMetricFamily(
            "omnipost_queue_notifications",
            "Notifications in the store per state, every tenant's (the same store-wide figure "
            "from every worker).",
            labels=["state"],
        )
        for state in _DEPTH_STATES:
            totals.add_metric([state], getattr(snap.queue, state))
        yield totals
    depth = GaugeMetricFamily(
        "omnipost_queue_depth",
        "Notifications in the store per state, of the tenants with the most queued (the same "
        "store-wide figure from every worker).",
        labels=["tenant", "state"],
    )
    oldest = GaugeMetricFamily(
        "omnipost_queue_oldest_age_seconds",
        "Age of the tenant's oldest queued notification; 0 when none is queued.",
        labels=["tenant"],
    )
    for row in snap.depth:
        for state in _DEPTH_STATES:
            depth.add_metric([row.tenant, state], getattr(row, state))
        oldest.add_metric([row.tenant], row.oldest_queued_age_s or 0.0)
    yield from (depth, oldest)


def _buckets(snap: Snapshot) -> Iterator[Metric]:
    labels = ["bucket", "scope", "tenant", "provider"]
    tokens = GaugeMetricFamily(
        "omnipost_bucket_tokens", "Tokens in the rate-limit bucket now.", labels=labels
    )
    capacity = GaugeMetricFamily(
        "omnipost_bucket_capacity", "Most tokens the bucket holds (its burst).", labels=labels
    )
    rate = GaugeMetricFamily(
        "omnipost_bucket_rate_per_second", "Tokens the bucket gains per second.", labels=labels
    )
    blocked = GaugeMetricFamily(
        "omnipost_bucket_blocked_seconds",
        "How long the bucket is still held empty after a provider's 429.",
        labels=labels,
    )
    for level in snap.buckets:
        key = level.key
        values = [str(key), key.scope.value, key.tenant, key.provider]
        tokens.add_metric(values, level.tokens)
        capacity.add_metric(values, level.burst)
        rate.add_metric(values, level.rate_per_s)
        blocked.add_metric(values, level.blocked_for_s)
    yield from (tokens, capacity, rate, blocked)


def _histograms(snap: Snapshot) -> Iterator[Metric]:
    sends = HistogramMetricFamily(
        "omnipost_send_duration_seconds",
        "How long the provider took to answer a send, whatever the outcome.",
        labels=["provider"],
    )
    deliveries = HistogramMetricFamily(
        "omnipost_delivery_latency_seconds",
        "From enqueue to delivery, for the notifications this worker delivered.",
        labels=["provider"],
    )
    for family, histograms in ((sends, snap.send_durations), (deliveries, snap.delivery_latencies)):
        for h in histograms:
            # str(0.005) is "0.005", str(1.0) is "1.0": the client's own spelling of "le".
            pairs = zip(h.bounds_s, h.cumulative, strict=True)
            buckets = [(str(float(bound)), float(n)) for bound, n in pairs]
            buckets.append(("+Inf", float(h.count)))
            family.add_metric([h.provider], buckets, sum_value=h.sum_s)
        yield family


def _health(snap: Snapshot) -> Iterator[Metric]:
    is_open = GaugeMetricFamily(
        "omnipost_provider_circuit_open",
        "1 while the provider's circuit is open or half-open (its sends are held), else 0.",
        labels=["provider"],
    )
    state = GaugeMetricFamily(
        "omnipost_provider_circuit_state",
        "1 for the provider's circuit state now, 0 for the others.",
        labels=["provider", "state"],
    )
    failures = GaugeMetricFamily(
        "omnipost_provider_failures",
        "Provider-level failures in a row (0 while the circuit is closed).",
        labels=["provider"],
    )
    for health in snap.health:
        is_open.add_metric([health.provider], float(health.state is not CircuitState.CLOSED))
        for each in CircuitState:
            state.add_metric([health.provider, each.value], float(health.state is each))
        failures.add_metric([health.provider], health.failures)
    yield from (is_open, state, failures)


def _worker(snap: Snapshot, now: float) -> Iterator[Metric]:
    yield InfoMetricFamily(
        "omnipost_worker",
        "This worker's id and where its rate limits live (local, redis, local-fallback).",
        value={"worker_id": snap.worker_id, "limiter": snap.limiter_backend},
    )
    engine_state = GaugeMetricFamily(
        "omnipost_engine_state", "1 for the engine's state now, 0 for the others.", labels=["state"]
    )
    for each in EngineState:
        engine_state.add_metric([each.value], float(snap.state == each.value))
    yield engine_state
    for name, text, value in (
        ("omnipost_concurrency", "Sends this worker runs at once, at most.", snap.concurrency),
        ("omnipost_sends_in_flight", "Leased notifications being sent now.", snap.inflight),
        ("omnipost_event_loop_lag_seconds", "How late the event loop runs.", snap.loop_lag_s),
        (
            "omnipost_snapshot_age_seconds",
            "How old these figures are (they are refreshed about once a second).",
            max(0.0, now - snap.ts),
        ),
    ):
        yield GaugeMetricFamily(name, text, value=value)


# -- serving -----------------------------------------------------------------------------------


class SnapshotCollector:
    """A prometheus_client collector over the latest snapshot. ``update`` (on the loop) swaps
    in a new one; ``collect`` (on the server's thread) reads whichever is there: a snapshot is
    immutable, and replacing the reference is atomic."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None

    def update(self, snap: Snapshot) -> None:
        self._snapshot = snap

    def collect(self) -> list[Metric]:
        snap = self._snapshot
        return [] if snap is None else families(snap, time.time())

    def __repr__(self) -> str:
        ts = None if self._snapshot is None else self._snapshot.ts
        return f"SnapshotCollector(snapshot_ts={ts})"


class MetricsExporter:
    """``async with MetricsExporter(address) as metrics:`` listens on ``address`` (nothing at
    all when it is None); ``async with metrics.following(engine.snapshot):`` keeps the figures
    fresh meanwhile. Raises OmniPostError, one sentence, when the address cannot be bound."""

    def __init__(
        self,
        address: MetricsAddress | None,
        *,
        refresh_s: float = _REFRESH_S,
        extra: Collector | None = None,
    ) -> None:
        self.address = address
        self._refresh_s = refresh_s
        self._collector = SnapshotCollector()
        self._extra = extra  # another collector on the same endpoint (the HTTP API's)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._failing = False  # said once per outage, not once a second

    async def __aenter__(self) -> Self:
        if self.address is not None:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(self._collector)
            if self._extra is not None:
                registry.register(self._extra)
            host, port = self.address.host, self.address.port
            try:
                self._server, self._thread = start_http_server(port, addr=host, registry=registry)
            except OSError as exc:  # in use, not an address of this host, not allowed
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise OmniPostError(
                    f"cannot serve metrics on {host} port {port}: {reason.rstrip('.')}."
                ) from None
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening (safe to call twice)."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)  # waits for its poll loop to end
            server.server_close()
        if thread is not None:
            await asyncio.to_thread(thread.join, 5.0)

    @contextlib.asynccontextmanager
    async def following(self, snapshot: SnapshotSource) -> AsyncIterator[None]:
        """Take ``snapshot()`` now and then every ``refresh_s`` while inside; a failed one is
        logged and the last one kept (``omnipost_snapshot_age_seconds`` shows it ageing)."""
        if self._server is None:
            yield
            return
        await self._take(snapshot)
        task = asyncio.create_task(self._refresh(snapshot), name="omnipost-metrics")
        task.add_done_callback(_report_death)
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _refresh(self, snapshot: SnapshotSource) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self._take(snapshot)

    async def _take(self, snapshot: SnapshotSource) -> None:
        try:
            self._collector.update(await snapshot())
        except OmniPostError as exc:
            log.log(
                logging.DEBUG if self._failing else logging.WARNING,
                "metrics not refreshed: %s",
                exc.message,
            )
            self._failing = True
            return
        if self._failing:
            log.info("metrics refreshed again")
            self._failing = False

    def says(self) -> str:
        """A phrase for the start-up line: where metrics are served, or nothing."""
        return "" if self.address is None else f", metrics on {self.address.url}"

    def __repr__(self) -> str:
        where = "off" if self.address is None else self.address.url
        return f"MetricsExporter({where}, serving={self._server is not None})"


def _report_death(task: asyncio.Task[None]) -> None:
    """A refresher that died of a bug says so: the endpoint goes on serving the last figures
    (their age shows it), and the worker goes on delivering, which matters more."""
    if not task.cancelled() and task.exception() is not None:
        log.error("metrics stopped refreshing", exc_info=task.exception())
