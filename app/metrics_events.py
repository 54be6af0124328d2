"""Status events on the Prometheus endpoint (app/metrics.py): events written to the outbox and
delivered, failed tries by answer, and per endpoint (labelled by tenant and endpoint id, never
its URL) what waits, what was given up, the oldest waiting event's age and whether it is
enabled. Nothing while no endpoint exists."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine import Snapshot

__all__ = ["event_families"]


def event_families(snap: Snapshot) -> Iterator[Metric]:
    figures = snap.events
    if figures is None:
        return
    yield CounterMetricFamily(
        "omnipost_status_events_written",
        "Status events written to the outbox, every endpoint's, since the store was made (its "
        "highest id; a Postgres sequence may skip the ids of transactions rolled back).",
        value=figures.written,
    )
    yield CounterMetricFamily(
        "omnipost_status_events_delivered",
        "Status events this worker delivered (answered 2xx).",
        value=snap.totals.events_delivered,
    )
    failed = CounterMetricFamily(
        "omnipost_status_events_failed",
        "Tries of status events this worker made that failed, by answer: the HTTP status, "
        "'no answer' (no connection, no answer in time) or 'refused' (a private address).",
        labels=["answer"],
    )
    for answer, count in figures.failures:
        failed.add_metric([answer], count)
    yield failed
    labels = ["tenant", "endpoint"]
    pending = GaugeMetricFamily(
        "omnipost_status_events_pending", "Events waiting for an endpoint.", labels=labels
    )
    held = GaugeMetricFamily(
        "omnipost_status_events_held",
        "Events waiting for a disabled endpoint to be enabled.",
        labels=labels,
    )
    given_up = GaugeMetricFamily(
        "omnipost_status_events_given_up",
        "Events given up after every retry, kept until retention prunes them.",
        labels=labels,
    )
    oldest = GaugeMetricFamily(
        "omnipost_status_events_oldest_pending_seconds",
        "The age of an endpoint's oldest event not delivered yet (absent when none waits).",
        labels=labels,
    )
    enabled = GaugeMetricFamily(
        "omnipost_webhook_enabled",
        "1 while an endpoint is enabled, 0 once disabled (a 410, or failing for days).",
        labels=labels,
    )
    for e in figures.endpoints:
        values = [e.tenant, str(e.endpoint_id)]
        pending.add_metric(values, e.pending)
        held.add_metric(values, e.held)
        given_up.add_metric(values, e.failed)
        enabled.add_metric(values, 1 if e.enabled else 0)
        if e.oldest_pending_age_s is not None:
            oldest.add_metric(values, e.oldest_pending_age_s)
    yield from (pending, held, given_up, oldest, enabled)
