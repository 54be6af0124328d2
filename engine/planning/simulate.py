"""Burst simulation: when each of ``count`` notifications is enqueued, by pattern, and the
runner that enqueues them at those times."""

from __future__ import annotations

import enum
import math
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from engine.core.clock import Clock
from engine.core.domain import EnqueueItem
from engine.core.errors import ConfigError

__all__ = [
    "EnqueueMany",
    "Pattern",
    "SimulationProgress",
    "predicted_drain_s",
    "run_simulation",
    "schedule",
]

EnqueueMany = Callable[[str, Sequence[EnqueueItem]], Awaitable[object]]

_BATCH = 500  # most items of one tenant in one enqueue call (one transaction)
_POLL_S = 0.05  # longest wait before the clock is read again


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


@dataclass(frozen=True, slots=True)
class SimulationProgress:
    enqueued: int
    total: int
    elapsed_s: float


async def run_simulation(
    enqueue_many: EnqueueMany,
    clock: Clock,
    tenants: Sequence[str],
    provider: str,
    offsets: Sequence[float],
    *,
    progress: Callable[[SimulationProgress], None] | None = None,
    run_id: str | None = None,
    ttl_s: float | None = None,
) -> int:
    """Enqueue one notification per offset for each tenant through ``provider``, each once
    ``clock.monotonic()`` is ``offsets[i]`` seconds past the start (ascending, as ``schedule``
    gives them); returns how many were enqueued. Every tenant gets the due ones together, at
    most ``_BATCH`` a call, then ``progress`` hears of it. Between arrivals it sleeps on
    ``clock``, at most ``_POLL_S`` at a time. Recipients, payloads and keys carry ``run_id``
    (made up when None), so a second run adds new notifications; with ``ttl_s`` each is never
    sent later than that after it is enqueued. Cancel the task to stop early."""
    run = run_id or uuid.uuid4().hex[:10]
    count = len(offsets)
    start = clock.monotonic()
    # Absolute times, so that a fake clock stepped by the waits lands on each exactly.
    arrivals = [start + offset for offset in offsets]
    done = 0
    while done < count:
        now = clock.monotonic()
        upto = _due(arrivals, done, now)
        if upto == done:
            await clock.sleep(min(_POLL_S, arrivals[done] - now))
            continue
        for tenant in tenants:
            await enqueue_many(tenant, _items(provider, tenant, run, range(done, upto), ttl_s))
        done = upto
        if progress is not None:
            progress(SimulationProgress(done * len(tenants), count * len(tenants), now - start))
    return count * len(tenants)


def _due(arrivals: Sequence[float], done: int, now: float) -> int:
    """The index after the last of the next (at most ``_BATCH``) arrivals due by ``now``."""
    upto = done
    while upto < len(arrivals) and arrivals[upto] <= now and upto - done < _BATCH:
        upto += 1
    return upto


def _items(
    provider: str, tenant: str, run: str, numbers: range, ttl_s: float | None = None
) -> list[EnqueueItem]:
    return [
        EnqueueItem(
            provider,
            f"sim{i}@{tenant}.example",
            {"sim": run, "n": i},
            f"sim-{run}-{i}",
            ttl_s=ttl_s,
        )
        for i in numbers
    ]
