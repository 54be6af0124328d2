"""Plain values the bridge hands to the views, the rate meter behind the dashboard's rates,
and the arithmetic of the "N per window" limit."""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

from engine import ConfigError, Counters, Limit, NotificationView, StoreSize

__all__ = [
    "LogEntry",
    "LogKind",
    "QueueRow",
    "RateMeter",
    "Rates",
    "Status",
    "StoreStatus",
    "limit_for_window",
]


class LogKind(enum.StrEnum):
    DELIVERY = "delivery"
    ERROR = "error"
    AUDIT = "audit"


@dataclass(frozen=True, slots=True)
class LogEntry:
    ts: float  # unix seconds
    kind: LogKind
    tenant: str
    text: str


@dataclass(frozen=True, slots=True)
class Status:
    """What the status bar shows; compared as a whole so it is re-sent only on change."""

    store: str
    limiter_backend: str
    state: str
    loop_lag_ms: int
    workers: int
    totals: Counters
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """What the store view shows beside the retention windows; re-sent only on change."""

    url: str  # masked
    size: StoreSize
    # unix s: the last background pass of any engine, or this console's last "prune now"
    last_pruned_at: float | None


@dataclass(frozen=True, slots=True)
class QueueRow:
    tenant: str
    provider: str
    view: NotificationView


@dataclass(frozen=True, slots=True)
class Rates:
    delivered_per_s: float = 0.0
    throttled_per_s: float = 0.0
    failed_per_s: float = 0.0  # retried and dead together


class RateMeter:
    """Outcomes per second over the last ``window_s`` seconds, from successive totals: quicker
    to follow a burst than the engine's mean over whole seconds. Totals that went down (a new
    engine) start the meter over."""

    def __init__(self, window_s: float = 2.0) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, Counters]] = deque()

    def update(self, ts: float, totals: Counters) -> Rates:
        if self._seen and totals.delivered < self._seen[-1][1].delivered:
            self._seen.clear()
        self._seen.append((ts, totals))
        while len(self._seen) > 2 and ts - self._seen[1][0] >= self.window_s:
            self._seen.popleft()
        first_ts, first = self._seen[0]
        span_s = ts - first_ts
        if span_s <= 0:
            return Rates()
        return Rates(
            (totals.delivered - first.delivered) / span_s,
            (totals.throttled - first.throttled) / span_s,
            (totals.failed + totals.dead - first.failed - first.dead) / span_s,
        )

    def __repr__(self) -> str:
        return f"RateMeter({len(self._seen)} samples over {self.window_s:g} s)"


def limit_for_window(count: int, window_s: float, burst_share: float = 0.1) -> Limit:
    """A bucket that never admits more than ``count`` in any ``window_s`` seconds: a burst of
    ``burst_share`` of the count (at least 1) up front, the rest spread over the window, so
    ``burst + rate_per_s * window_s == count``. Raises ``ConfigError`` for a count below 2,
    a window that is not above 0, or a share outside [0, 1)."""
    if count < 2:
        raise ConfigError("the count per window must be at least 2.")
    if not (math.isfinite(window_s) and window_s > 0):
        raise ConfigError("the window must be a number of seconds above 0.")
    if not 0 <= burst_share < 1:
        raise ConfigError("the burst share must be at least 0 and below 1.")
    burst = min(float(count - 1), max(1.0, math.floor(count * burst_share)))
    return Limit((count - burst) / window_s, burst)
