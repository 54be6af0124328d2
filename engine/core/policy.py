"""Pure policies: how long to back off, what to do with a provider's answer, and in which
order to visit keys.

The dispatcher only carries these decisions out; tests check them as tables.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeVar

from engine.core.domain import BucketKey, NotificationState, Outcome, SendResult

__all__ = [
    "EXPIRED",
    "STORE_OUTAGE",
    "STORE_RETRY",
    "WRITE_RETRY",
    "Backoff",
    "Decision",
    "RetryPolicy",
    "decide",
]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits that grow after each failure in a row: the ``attempt``-th (from 1) is
    ``min(max_s, first_s * factor ** (attempt - 1))``, of which the last ``jitter`` fraction
    is scaled by a random draw. Every backoff in the engine is one of these."""

    first_s: float
    factor: float = 2.0
    max_s: float = math.inf
    jitter: float = 0.0

    def delay_s(self, attempt: int, rand: float = 1.0) -> float:
        """The wait before retry ``attempt`` (an attempt below 1 counts as 1); ``rand`` is
        uniform in [0, 1) and only matters with ``jitter`` (1.0, the default, is no jitter)."""
        try:
            grown = self.first_s * self.factor ** max(0, attempt - 1)
        except OverflowError:  # a float power past ~1e308; every sane cap is far below
            grown = math.inf
        delay = min(self.max_s, grown)
        if math.isinf(delay):
            return delay  # inf * 0 would be NaN
        return delay * (1.0 - self.jitter) + delay * self.jitter * rand


# The engine's other backoffs, here so that one table tests them all.
STORE_RETRY = Backoff(first_s=0.05, factor=2.0, max_s=2.0)  # a locked or dropped transaction
STORE_OUTAGE = Backoff(first_s=0.5, factor=2.0, max_s=10.0)  # dispatch while the store is down
WRITE_RETRY = Backoff(first_s=1.0, factor=1.0)  # outcomes that could not be written yet


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of transient failures: the n-th waits ``backoff.delay_s(n, rand)``, which
    doubles from ``base_s`` up to ``cap_s``, the last ``jitter`` fraction random."""

    base_s: float = 1.0
    cap_s: float = 300.0
    jitter: float = 0.5
    default_retry_after_s: float = 1.0
    max_retry_after_s: float = 3600.0

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.base_s, 2.0, self.cap_s, self.jitter)

    def backoff_s(self, failures: int, rand: float) -> float:
        """Delay after the ``failures``-th failure (>= 1); ``rand`` is uniform in [0, 1)."""
        return self.backoff.delay_s(failures, rand)


@dataclass(frozen=True, slots=True)
class Decision:
    state: NotificationState
    delay_s: float = 0.0  # from now, when state is QUEUED
    spend_attempt: bool = False
    throttle_s: float | None = None  # hold the provider's bucket empty this long


_DELIVERED = Decision(NotificationState.DELIVERED)  # a frozen value: one serves every send
EXPIRED = Decision(NotificationState.EXPIRED)


def decide(
    result: SendResult, *, failures: int, max_attempts: int, policy: RetryPolicy, rand: float
) -> Decision:
    """What happens to a notification after one send; ``failures`` counts earlier transient
    failures, so this send is attempt ``failures + 1`` of ``max_attempts``."""
    if result.outcome is Outcome.DELIVERED:
        return _DELIVERED
    if result.outcome is Outcome.EXPIRED:  # the engine's deadline, or the provider's answer
        return EXPIRED
    if result.outcome is Outcome.THROTTLED:
        wait_s = result.retry_after_s
        if wait_s is None or math.isnan(wait_s) or wait_s < 0:
            wait_s = policy.default_retry_after_s
        wait_s = min(wait_s, policy.max_retry_after_s)
        return Decision(NotificationState.QUEUED, delay_s=wait_s, throttle_s=wait_s)
    if result.outcome is Outcome.TRANSIENT and failures + 1 < max_attempts:
        delay_s = policy.backoff_s(failures + 1, rand)
        return Decision(NotificationState.QUEUED, delay_s=delay_s, spend_attempt=True)
    return Decision(NotificationState.DEAD, spend_attempt=result.outcome is Outcome.TRANSIENT)


@functools.lru_cache(maxsize=4096)
def send_keys(tenant: str, provider: str) -> tuple[BucketKey, BucketKey, BucketKey]:
    """The buckets a send of ``tenant`` through ``provider`` takes a token from (remembered:
    the dispatcher asks for the same few again and again)."""
    return BucketKey.for_send(tenant, provider)
