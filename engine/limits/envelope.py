"""The rate envelope of docs/architecture.md, checked over delivery timestamps.

A bucket with ``rate_per_s`` and ``burst`` admits at most ``burst + rate_per_s * W`` sends in
any window of ``W`` seconds, plus one for the edge. Nothing here reads a clock: the timestamps
are the time, in any unit of seconds the caller likes (wall-clock ``ts``, a fake clock's
readings), and need not be sorted.

Windows slide: one starts at every delivery and is closed at both ends, ``[t, t + W]``, so no
window that could hold more deliveries is left out. ``worst_window`` checks windows of one
length; ``worst_span`` checks every length at once, for weighted takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Window",
    "envelope_bound",
    "max_in_window",
    "min_in_window",
    "worst_span",
    "worst_window",
]

# The bound is a float and the count often a whole number: a count on the bound must hold.
_SLACK = 1e-9


def envelope_bound(
    window_s: float, rate_per_s: float, burst: float, *, edges: float = 1.0, lag_s: float = 0.0
) -> float:
    """The most a bucket may admit in ``window_s`` seconds: ``burst + rate_per_s * (window_s +
    lag_s) + edges``. ``edges``: 1 for the one delivery a closed window may catch at its end (0
    for tokens counted exactly; one per process when each enforces its own share). ``lag_s``:
    how far a recorded time may trail the moment the token was taken."""
    return burst + rate_per_s * (window_s + lag_s) + edges


@dataclass(frozen=True, slots=True)
class Window:
    """``count`` deliveries (or tokens) in ``[start, start + window_s]``, where the envelope
    allows ``allowed``. ``holds`` is whether the count is within it."""

    start: float
    window_s: float
    count: float
    allowed: float

    @property
    def holds(self) -> bool:
        return self.count <= self.allowed + _SLACK * (1 + abs(self.allowed))


def _counts(timestamps: Iterable[float], window_s: float) -> list[tuple[float, int]]:
    """(start, deliveries in ``[start, start + window_s]``) for a window at every delivery."""
    if not window_s > 0:  # also rejects NaN
        raise ValueError(f"a window must last more than 0 s, not {window_s!r}.")
    ts = sorted(timestamps)
    counts = []
    end = 0
    for start, t in enumerate(ts):
        end = max(end, start)
        while end < len(ts) and ts[end] <= t + window_s:
            end += 1
        counts.append((t, end - start))
    return counts


def max_in_window(timestamps: Iterable[float], window_s: float) -> int:
    """The most deliveries in any window ``[t, t + window_s]`` that starts at a delivery (0 for
    none). Raises ``ValueError`` for a window that is not above 0."""
    return max((count for _, count in _counts(timestamps, window_s)), default=0)


def min_in_window(timestamps: Sequence[float], window_s: float) -> int:
    """The fewest deliveries in a window ``[t, t + window_s]`` that starts at a delivery and
    ends by the last one: how slow the steadiest stretch of a run got. 0 when the deliveries
    span less than one window. Raises ``ValueError`` for a window that is not above 0."""
    last = max(timestamps, default=0.0)
    fitting = [count for t, count in _counts(timestamps, window_s) if t + window_s <= last]
    return min(fitting, default=0)


def worst_window(
    timestamps: Iterable[float],
    window_s: float,
    rate_per_s: float,
    burst: float,
    *,
    edges: float = 1.0,
    lag_s: float = 0.0,
) -> Window:
    """The fullest window of ``window_s`` seconds over ``timestamps``, against the envelope
    ``envelope_bound(window_s, rate_per_s, burst, edges=edges, lag_s=lag_s)``; the earliest of
    equally full ones. With no timestamps, an empty window at 0. Raises ``ValueError`` for a
    window that is not above 0."""
    start, count = max(_counts(timestamps, window_s), key=lambda c: c[1], default=(0.0, 0))
    allowed = envelope_bound(window_s, rate_per_s, burst, edges=edges, lag_s=lag_s)
    return Window(start, window_s, count, allowed)


def worst_span(
    takes: Iterable[tuple[float, float]], rate_per_s: float, burst: float, *, edges: float = 0.0
) -> Window:
    """Over every window of every length that starts and ends at a take, the one whose tokens
    exceed (or come closest to) ``envelope_bound(length, rate_per_s, burst, edges=edges)``.
    ``takes``: (time, tokens taken), in any order. With no takes, an empty window at 0.

    One pass over the takes sorted by time: for the take ending at ``j``, the best start
    ``i <= j`` is the one with the most ``rate_per_s * t_i - taken before i``, kept as it goes.
    """
    best = Window(0.0, 0.0, 0.0, envelope_bound(0.0, rate_per_s, burst, edges=edges))
    taken = 0.0  # tokens taken before the current take
    start_t, start_taken = 0.0, 0.0
    start_score = float("-inf")
    for t, n in sorted(takes, key=lambda take: take[0]):
        if rate_per_s * t - taken > start_score:
            start_t, start_taken, start_score = t, taken, rate_per_s * t - taken
        taken += n
        allowed = envelope_bound(t - start_t, rate_per_s, burst, edges=edges)
        if taken - start_taken - allowed > best.count - best.allowed:
            best = Window(start_t, t - start_t, taken - start_taken, allowed)
    return best
