"""The API's own figures, for the Prometheus endpoint (``app.metrics``): requests by route,
method and status, their latency, and the requests refused by reason. Labels are route
templates (``/v1/notifications/{id}``), never paths, keys or recipients."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric

__all__ = ["ApiMetrics"]

_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ApiMetrics:
    """A collector (``collect()``) of the API's metrics; register it on a registry."""

    def __init__(self) -> None:
        self.requests = Counter(
            "omnipost_api_requests",
            "HTTP API requests answered, by route template, method and status",
            ["route", "method", "status"],
            registry=None,
        )
        self.latency = Histogram(
            "omnipost_api_request_seconds",
            "Time from a request's start to its answer's end, by route template",
            ["route"],
            buckets=_BUCKETS_S,
            registry=None,
        )
        self.rejected = Counter(
            "omnipost_api_rejected",
            "HTTP API requests refused, by reason",
            ["reason"],
            registry=None,
        )
        # Each (route, method, status)'s children, found once: ``labels`` costs a request
        # more than counting does. As many as the metrics have series.
        self._answered: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def answered(self, route: str, method: str, status: int, seconds: float) -> None:
        found = self._answered.get((route, method, status))
        if found is None:
            found = self._answered[route, method, status] = (
                self.requests.labels(route, method, str(status)),
                self.latency.labels(route),
            )
        found[0].inc()
        found[1].observe(seconds)

    def refused(self, reason: str) -> None:
        self.rejected.labels(reason).inc()

    def collect(self) -> Iterator[Metric]:
        yield from self.requests.collect()
        yield from self.latency.collect()
        yield from self.rejected.collect()
