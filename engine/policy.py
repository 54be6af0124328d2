"""Pure policies: what to do with a provider's answer, and in which order to visit keys.

The dispatcher only carries these decisions out; tests check them as tables.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from engine.domain import NotificationState, Outcome, SendResult

__all__ = ["Decision", "RetryPolicy", "decide", "round_robin"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter: the n-th transient failure waits
    ``min(cap_s, base_s * 2**(n-1))``, of which the last ``jitter`` fraction is random."""

    base_s: float = 1.0
    cap_s: float = 300.0
    jitter: float = 0.5
    default_retry_after_s: float = 1.0
    max_retry_after_s: float = 3600.0

    def backoff_s(self, failures: int, rand: float) -> float:
        """Delay after the ``failures``-th failure (>= 1); ``rand`` is uniform in [0, 1)."""
        # 2.0 ** n overflows past n = 1023; every sane cap is reached long before that.
        doublings = min(max(0, failures - 1), 1023)
        delay = min(self.cap_s, self.base_s * 2.0**doublings)
        return delay * (1.0 - self.jitter) + delay * self.jitter * rand


@dataclass(frozen=True, slots=True)
class Decision:
    state: NotificationState
    delay_s: float = 0.0  # from now, when state is QUEUED
    spend_attempt: bool = False
    throttle_s: float | None = None  # hold the provider's bucket empty this long


def decide(
    result: SendResult, *, failures: int, max_attempts: int, policy: RetryPolicy, rand: float
) -> Decision:
    """What happens to a notification after one send; ``failures`` counts earlier transient
    failures, so this send is attempt ``failures + 1`` of ``max_attempts``."""
    if result.outcome is Outcome.DELIVERED:
        return Decision(NotificationState.DELIVERED)
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


def round_robin(keys: Sequence[K], last: K | None) -> list[K]:
    """``keys`` (in a stable order) rotated to start just after ``last``, the key served last;
    from the first key when ``last`` is no longer among them."""
    if last is None or not keys:
        return list(keys)
    try:
        start = keys.index(last) + 1
    except ValueError:
        start = 0
    return [*keys[start:], *keys[:start]]
