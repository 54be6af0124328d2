"""Burst simulation: when each of ``count`` notifications is enqueued, by pattern."""

from __future__ import annotations

import enum
import math
import random

from engine.errors import ConfigError

__all__ = ["Pattern", "predicted_drain_s", "schedule"]


class Pattern(enum.StrEnum):
    SPIKE = "spike"  # all at once
    STEADY = "steady"  # evenly spread over the duration
    RAMP = "ramp"  # the arrival rate grows linearly from 0 over the duration
    POISSON = "poisson"  # random arrivals at a mean rate of count / duration


def schedule(
    pattern: Pattern | str, count: int, duration_s: float, rng: random.Random | None = None
) -> list[float]:
    """Offsets in seconds from the start, ascending, one per notification, all within
    ``[0, duration_s]`` (a spike is all at 0)."""
    try:
        pattern = Pattern(pattern)
    except ValueError:
        names = ", ".join(p.value for p in Pattern)
        raise ConfigError(f"pattern {pattern!r} is not known; use one of {names}.") from None
    if count < 0:
        raise ConfigError("count must not be negative.")
    if not math.isfinite(duration_s) or duration_s < 0:
        raise ConfigError("duration must be a finite number of seconds, 0 or more.")
    if pattern is Pattern.SPIKE or duration_s == 0 or count == 0:
        return [0.0] * count
    if pattern is Pattern.STEADY:
        return [duration_s * i / count for i in range(count)]
    if pattern is Pattern.RAMP:
        # The cumulative count of a linearly growing rate is quadratic in time: invert it.
        return [duration_s * math.sqrt(i / count) for i in range(count)]
    rng = rng or random.Random()
    mean_gap_s = duration_s / count
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(min(t, duration_s))
        t += rng.expovariate(1.0 / mean_gap_s)
    return offsets


def predicted_drain_s(
    count: int, rate_per_s: float | None, burst: float, arrival_s: float
) -> float:
    """Seconds from the start until the last of ``count`` notifications can be sent through a
    bucket of ``rate_per_s`` and ``burst`` (``None``: unlimited) when arrivals end at
    ``arrival_s``: the later of the arrivals' end and the bucket's own pace."""
    if rate_per_s is None or count <= burst:
        return arrival_s
    return max(arrival_s, (count - burst) / rate_per_s)
