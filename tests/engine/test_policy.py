"""The pure policies as tables: what a provider's answer leads to, backoff, visiting order."""

from __future__ import annotations

import math

import pytest

from engine.core.domain import NotificationState, SendResult
from engine.core.policy import (
    STORE_OUTAGE,
    STORE_RETRY,
    WRITE_RETRY,
    Backoff,
    Decision,
    RetryPolicy,
    decide,
)

QUEUED = NotificationState.QUEUED
DEAD = NotificationState.DEAD
DEFAULT = RetryPolicy()  # base 1 s, cap 300 s, jitter 0.5, retry-after 1 s by default, 1 h at most


# (result, failures so far, max_attempts, rand, decision)
DECISIONS: dict[str, tuple[SendResult, int, int, float, Decision]] = {
    "delivered": (SendResult.delivered(), 0, 5, 0.3, Decision(NotificationState.DELIVERED)),
    "delivered on the last attempt": (
        SendResult.delivered(),
        4,
        5,
        0.3,
        Decision(NotificationState.DELIVERED),
    ),
    "throttled with retry-after": (
        SendResult.throttled(2.5),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=2.5, throttle_s=2.5),
    ),
    "throttled without retry-after": (
        SendResult.throttled(),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=1.0, throttle_s=1.0),
    ),
    "throttled, retry-after 0": (
        SendResult.throttled(0.0),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=0.0, throttle_s=0.0),
    ),
    "throttled, negative retry-after": (
        SendResult.throttled(-5.0),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=1.0, throttle_s=1.0),
    ),
    "throttled, NaN retry-after": (
        SendResult.throttled(math.nan),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=1.0, throttle_s=1.0),
    ),
    "throttled, huge retry-after is capped": (
        SendResult.throttled(1e9),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=3600.0, throttle_s=3600.0),
    ),
    "throttled, infinite retry-after is capped": (
        SendResult.throttled(math.inf),
        0,
        5,
        0.3,
        Decision(QUEUED, delay_s=3600.0, throttle_s=3600.0),
    ),
    "throttled on the last attempt spends nothing": (
        SendResult.throttled(3.0),
        4,
        5,
        0.3,
        Decision(QUEUED, delay_s=3.0, throttle_s=3.0),
    ),
    "transient, first failure": (
        SendResult.transient("503"),
        0,
        5,
        0.0,
        Decision(QUEUED, delay_s=0.5, spend_attempt=True),
    ),
    "transient, below max_attempts": (
        SendResult.transient("timeout"),
        3,
        5,
        1.0,
        Decision(QUEUED, delay_s=8.0, spend_attempt=True),
    ),
    "transient at max_attempts": (
        SendResult.transient("timeout"),
        4,
        5,
        0.3,
        Decision(DEAD, spend_attempt=True),
    ),
    "transient beyond max_attempts": (
        SendResult.transient("timeout"),
        9,
        5,
        0.3,
        Decision(DEAD, spend_attempt=True),
    ),
    "transient, a single attempt allowed": (
        SendResult.transient("timeout"),
        0,
        1,
        0.3,
        Decision(DEAD, spend_attempt=True),
    ),
    "permanent": (SendResult.permanent("bad recipient"), 0, 5, 0.3, Decision(DEAD)),
    "permanent after transient failures": (
        SendResult.permanent("400"),
        3,
        5,
        0.3,
        Decision(DEAD),
    ),
}


@pytest.mark.parametrize(
    ("result", "failures", "max_attempts", "rand", "expected"),
    list(DECISIONS.values()),
    ids=list(DECISIONS),
)
def test_decide(
    result: SendResult, failures: int, max_attempts: int, rand: float, expected: Decision
) -> None:
    got = decide(result, failures=failures, max_attempts=max_attempts, policy=DEFAULT, rand=rand)
    assert got == expected


def test_decide_uses_the_policys_throttle_settings() -> None:
    policy = RetryPolicy(default_retry_after_s=7.0, max_retry_after_s=60.0)
    rows = [(None, 7.0), (-1.0, 7.0), (30.0, 30.0), (61.0, 60.0)]
    for retry_after_s, wait_s in rows:
        got = decide(
            SendResult.throttled(retry_after_s), failures=0, max_attempts=5, policy=policy, rand=0.5
        )
        assert (got.delay_s, got.throttle_s) == (wait_s, wait_s), retry_after_s


# (policy, failures, rand, delay)
BACKOFF: list[tuple[RetryPolicy, int, float, float]] = [
    (DEFAULT, 1, 0.0, 0.5),
    (DEFAULT, 1, 1.0, 1.0),
    (DEFAULT, 2, 0.0, 1.0),
    (DEFAULT, 2, 1.0, 2.0),
    (DEFAULT, 3, 0.5, 3.0),
    (DEFAULT, 9, 1.0, 256.0),
    (DEFAULT, 10, 0.0, 150.0),  # 512 capped at 300, then jittered
    (DEFAULT, 10, 1.0, 300.0),
    (DEFAULT, 60, 1.0, 300.0),
    (DEFAULT, 5_000, 1.0, 300.0),  # far past any float power of two
    (DEFAULT, 0, 1.0, 1.0),  # 0 is read as the first failure
    (DEFAULT, -3, 1.0, 1.0),
    (RetryPolicy(jitter=0.0), 3, 0.7, 4.0),
    (RetryPolicy(jitter=1.0), 3, 0.0, 0.0),
    (RetryPolicy(jitter=1.0), 3, 1.0, 4.0),
    (RetryPolicy(base_s=0.1, cap_s=1.0), 4, 1.0, 0.8),
    (RetryPolicy(base_s=0.1, cap_s=1.0), 5, 1.0, 1.0),
    (RetryPolicy(base_s=0.1, cap_s=1.0), 5, 0.0, 0.5),
]


@pytest.mark.parametrize(("policy", "failures", "rand", "delay_s"), BACKOFF)
def test_backoff_s(policy: RetryPolicy, failures: int, rand: float, delay_s: float) -> None:
    assert policy.backoff_s(failures, rand) == pytest.approx(delay_s)


def test_backoff_grows_until_the_cap() -> None:
    delays = [DEFAULT.backoff_s(n, 1.0) for n in range(1, 40)]
    assert delays == sorted(delays)
    assert max(delays) == DEFAULT.cap_s


def test_retry_backoff_is_a_backoff() -> None:
    assert DEFAULT.backoff == Backoff(first_s=1.0, factor=2.0, max_s=300.0, jitter=0.5)


# (backoff, attempt, rand, delay): the engine's own backoffs first, then the arithmetic.
BACKOFFS: list[tuple[Backoff, int, float, float]] = [
    # A store transaction that found the store locked or lost its connection: 5 tries.
    (STORE_RETRY, 1, 1.0, 0.05),
    (STORE_RETRY, 2, 1.0, 0.1),
    (STORE_RETRY, 3, 1.0, 0.2),
    (STORE_RETRY, 4, 1.0, 0.4),
    (STORE_RETRY, 7, 1.0, 2.0),  # 3.2 capped
    # Dispatch rounds failing in a row while the store is down.
    (STORE_OUTAGE, 1, 1.0, 0.5),
    (STORE_OUTAGE, 2, 1.0, 1.0),
    (STORE_OUTAGE, 4, 1.0, 4.0),
    (STORE_OUTAGE, 5, 1.0, 8.0),
    (STORE_OUTAGE, 6, 1.0, 10.0),
    (STORE_OUTAGE, 100, 1.0, 10.0),
    # Outcomes that could not be written: again every second.
    (WRITE_RETRY, 1, 1.0, 1.0),
    (WRITE_RETRY, 50, 1.0, 1.0),
    # The arithmetic.
    (Backoff(1.0, factor=3.0), 3, 1.0, 9.0),
    (Backoff(1.0), 0, 1.0, 1.0),  # below 1 counts as the first
    (Backoff(1.0), -2, 1.0, 1.0),
    (Backoff(1.0), 2_000, 1.0, math.inf),  # no cap: past every float power
    (Backoff(1.0, factor=10.0, max_s=60.0), 2_000, 1.0, 60.0),
    (Backoff(2.0, jitter=0.5), 2, 0.0, 2.0),  # the last half of 4 s scaled by 0
    (Backoff(2.0, jitter=0.5), 2, 0.5, 3.0),
    (Backoff(2.0, jitter=0.5), 2, 1.0, 4.0),
    (Backoff(2.0, jitter=1.0), 1, 0.25, 0.5),
    (Backoff(2.0, jitter=1.0), 2_000, 0.0, math.inf),  # not NaN
    (Backoff(2.0), 3, 0.0, 8.0),  # without jitter the draw does not matter
]


@pytest.mark.parametrize(("backoff", "attempt", "rand", "delay_s"), BACKOFFS)
def test_backoff_delay_s(backoff: Backoff, attempt: int, rand: float, delay_s: float) -> None:
    assert backoff.delay_s(attempt, rand) == pytest.approx(delay_s)


def test_backoff_without_a_draw_is_the_full_delay() -> None:
    assert Backoff(2.0, jitter=0.5).delay_s(2) == 4.0
