"""The rate envelope (``engine.limits.envelope``) as a test assertion over real delivery
timestamps."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.limits.envelope import max_in_window, min_in_window, worst_window

__all__ = ["DEFAULT_WINDOWS_S", "check_envelope", "max_in_window", "min_in_window"]

DEFAULT_WINDOWS_S = (0.1, 0.5, 1.0, 2.0, 5.0)


def check_envelope(
    timestamps: Iterable[float],
    rate_per_s: float,
    burst: float,
    windows: Sequence[float] = DEFAULT_WINDOWS_S,
    *,
    edges: float = 1.0,
    lag_s: float = 0.0,
) -> dict[float, int]:
    """Raise ``AssertionError`` naming the window when some window of ``W`` seconds (for each
    ``W`` in ``windows``) holds more than ``engine.limits.envelope.envelope_bound`` allows
    (``burst + rate_per_s * W + 1`` by default). Returns the most found in a window, per ``W``."""
    ts = sorted(timestamps)
    found: dict[float, int] = {}
    for window_s in windows:
        worst = worst_window(ts, window_s, rate_per_s, burst, edges=edges, lag_s=lag_s)
        assert worst.holds, (
            f"{worst.count:g} deliveries in the {window_s:g} s from {worst.start:.6f}; the "
            f"envelope of {rate_per_s:g}/s with burst {burst:g} allows {worst.allowed:g}"
        )
        found[window_s] = int(worst.count)
    return found
