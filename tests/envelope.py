"""The rate envelope of docs/architecture.md, checked over real delivery timestamps.

A bucket with ``rate_per_s`` and ``burst`` admits at most ``burst + rate_per_s * W`` sends in
any window of ``W`` seconds, plus one for the edge. The windows here slide: one starts at
every delivery and is closed at both ends, ``[t, t + W]``, so no window that could hold more
deliveries is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["DEFAULT_WINDOWS_S", "check_envelope", "max_in_window", "min_in_window"]

DEFAULT_WINDOWS_S = (0.1, 0.5, 1.0, 2.0, 5.0)


def _counts(timestamps: Iterable[float], window_s: float) -> list[tuple[float, int]]:
    """(start, deliveries in ``[start, start + window_s]``) for a window at every delivery."""
    if not window_s > 0:
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
    """The most deliveries in any window ``[t, t + window_s]`` that starts at a delivery
    (0 for no deliveries). The timestamps need not be sorted. Raises ``ValueError`` for a
    window that is not above 0."""
    return max((count for _, count in _counts(timestamps, window_s)), default=0)


def min_in_window(timestamps: Sequence[float], window_s: float) -> int:
    """The fewest deliveries in a window ``[t, t + window_s]`` that starts at a delivery and
    ends by the last one: how slow the steadiest stretch of a run got. 0 when the
    deliveries span less than one window."""
    last = max(timestamps, default=0.0)
    fitting = [count for t, count in _counts(timestamps, window_s) if t + window_s <= last]
    return min(fitting, default=0)


def check_envelope(
    timestamps: Iterable[float],
    rate_per_s: float,
    burst: float,
    windows: Sequence[float] = DEFAULT_WINDOWS_S,
) -> dict[float, int]:
    """Raise ``AssertionError`` naming the window when some window of ``W`` seconds (for each
    ``W`` in ``windows``) holds more than ``burst + rate_per_s * W + 1`` deliveries. Returns
    the most found in a window, per ``W``."""
    ts = sorted(timestamps)
    found: dict[float, int] = {}
    for window_s in windows:
        bound = burst + rate_per_s * window_s + 1
        worst_start, worst = max(_counts(ts, window_s), key=lambda c: c[1], default=(0.0, 0))
        assert worst <= bound + 1e-9, (  # 1e-9: the bound is a float, the count is not
            f"{worst} deliveries in the {window_s:g} s from {worst_start:.6f}; the envelope of "
            f"{rate_per_s:g}/s with burst {burst:g} allows {bound:g}"
        )
        found[window_s] = worst
    return found
