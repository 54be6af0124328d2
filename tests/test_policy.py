"""The pure policies as tables: what a provider's answer leads to, backoff, visiting order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.domain import NotificationState, SendResult
from engine.policy import (
    STORE_OUTAGE,
    STORE_RETRY,
    WRITE_RETRY,
    Backoff,
    Decision,
    HeldBuckets,
    RetryPolicy,
    decide,
    round_robin,
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


# (keys in their stable order, key served last, visiting order)
ROTATIONS: list[tuple[list[str], str | None, list[str]]] = [
    (["a", "b", "c"], None, ["a", "b", "c"]),
    (["a", "b", "c"], "a", ["b", "c", "a"]),
    (["a", "b", "c"], "b", ["c", "a", "b"]),
    (["a", "b", "c"], "c", ["a", "b", "c"]),
    (["a", "b", "c"], "gone", ["a", "b", "c"]),
    (["a"], "a", ["a"]),
    ([], "a", []),
    ([], None, []),
]


@pytest.mark.parametrize(("keys", "last", "order"), ROTATIONS)
def test_round_robin(keys: list[str], last: str | None, order: list[str]) -> None:
    before = list(keys)
    assert round_robin(keys, last) == order
    assert keys == before, "the keys given are not changed"


def test_round_robin_serves_every_key_in_turn() -> None:
    """Serving the first key of each rotation visits (tenant, provider) keys fairly."""
    keys = [(1, 1), (1, 2), (2, 1)]
    last: tuple[int, int] | None = None
    served = []
    for _ in range(7):
        last = round_robin(keys, last)[0]
        served.append(last)
    assert served == [*keys, *keys, keys[0]]


def test_held_buckets_hold_the_keys_behind_them_until_the_soonest_refill() -> None:
    from engine import BucketKey, Reservation
    from engine.policy import HeldBuckets

    held = HeldBuckets()
    assert held.for_s((1, 7)) is None
    sms, acme = BucketKey.for_provider("sms"), BucketKey.for_tenant("acme")
    keys = BucketKey.for_send("acme", "sms")
    held.note((1, 7), Reservation(keys, 0, 0.5, (sms, acme), (0.02, 0.5)))
    assert held.for_s((2, 7)) == 0.02  # another tenant behind the same provider
    assert held.for_s((1, 8)) == 0.5  # the same tenant through another provider
    assert held.for_s((1, 7)) == 0.02  # the soonest of the two
    assert held.for_s((2, 8)) is None  # nothing of theirs was found empty
    held.note((3, 9), Reservation(keys, 2, 0.1, (BucketKey.for_pair("x", "y"),), (0.1,)))
    assert held.for_s((3, 9)) == 0.1 and held.for_s((3, 8)) is None


def _held(
    providers: frozenset[int], notes: list[tuple[tuple[int, int], str, float]]
) -> HeldBuckets:
    """A round's ``HeldBuckets`` after reservations held short by the named buckets:
    ``(key, "tenant" | "provider" | "pair", refill_s)``."""
    from engine import BucketKey, Reservation

    held = HeldBuckets(providers)
    for key, scope, refill_s in notes:
        tenant, provider = f"t{key[0]}", f"p{key[1]}"
        bucket = {
            "tenant": BucketKey.for_tenant(tenant),
            "provider": BucketKey.for_provider(provider),
            "pair": BucketKey.for_pair(tenant, provider),
        }[scope]
        held.note(
            key,
            Reservation(BucketKey.for_send(tenant, provider), 0, refill_s, (bucket,), (refill_s,)),
        )
    return held


NOW = 100.0
KEYS = [(1, 7), (2, 7), (3, 7), (4, 8)]

# (providers of the round, buckets found empty, not_before of keys, start, wait_s so far,
#  (first key to ask, wait_s))
SKIPS: dict[
    str,
    tuple[
        frozenset[int],
        list[tuple[tuple[int, int], str, float]],
        dict[tuple[int, int], float],
        int,
        float,
        tuple[int, float],
    ],
] = {
    "nothing held, nothing known: the first key": (frozenset({7, 8}), [], {}, 0, 5.0, (0, 5.0)),
    "a key that grants nothing yet is passed over": (
        frozenset({7, 8}),
        [],
        {(1, 7): NOW + 0.3},
        0,
        5.0,
        (1, 0.3),
    ),
    "a not_before that has passed does not hold": (
        frozenset({7, 8}),
        [],
        {(1, 7): NOW - 1.0},
        0,
        5.0,
        (0, 5.0),
    ),
    "behind a held provider: its refill": (
        frozenset({7, 8}),
        [((1, 7), "provider", 0.2)],
        {},
        1,
        5.0,
        (3, 0.2),
    ),
    "behind a held provider, granting earlier: still the refill": (
        frozenset({7, 8}),
        [((1, 7), "provider", 0.2)],
        {(2, 7): NOW + 0.05},
        1,
        5.0,
        (3, 0.2),
    ),
    "behind a held provider, granting later: its own time": (
        frozenset({7, 8}),
        [((1, 7), "provider", 0.2)],
        {(2, 7): NOW + 0.5, (3, 7): NOW + 0.4},
        1,
        5.0,
        (3, 0.4),
    ),
    "behind a held tenant through another provider": (
        frozenset({7, 8}),
        [((4, 7), "tenant", 0.3)],
        {},
        3,
        5.0,
        (4, 0.3),
    ),
    "every provider held: none of the rest is asked": (
        frozenset({7, 8}),
        [((1, 7), "provider", 0.2), ((4, 8), "provider", 0.1)],
        {(2, 7): NOW + 0.5, (3, 7): NOW + 0.4},
        1,
        5.0,
        (4, 0.1),  # (4, 8), behind provider 8
    ),
    "every provider held, a sooner wait already: kept": (
        frozenset({7, 8}),
        [((1, 7), "provider", 0.2), ((4, 8), "provider", 0.1)],
        {},
        1,
        0.05,
        (4, 0.05),
    ),
    "every provider held, each key later than its refill: the soonest key": (
        frozenset({7}),
        [((1, 7), "provider", 0.2)],
        {(2, 7): NOW + 0.6, (3, 7): NOW + 0.45},
        1,
        5.0,
        (3, 0.45),
    ),
}


@pytest.mark.parametrize("case", list(SKIPS))
def test_held_buckets_skip(case: str) -> None:
    providers, notes, not_before, start, wait_s, expected = SKIPS[case]
    held = _held(providers, notes)
    keys = KEYS if providers != frozenset({7}) else KEYS[:3]
    index, soonest_s = held.skip(keys, start, not_before, NOW, wait_s)
    assert index == expected[0]
    assert soonest_s == pytest.approx(expected[1])


def _skip_by_the_rule(
    held: HeldBuckets,
    keys: list[tuple[int, int]],
    start: int,
    not_before: dict[tuple[int, int], float],
    wait_s: float,
) -> tuple[int, float]:
    """``skip`` as its docstring states it, key by key."""
    for index in range(start, len(keys)):
        key = keys[index]
        until_s = not_before[key] - NOW if not_before.get(key, NOW) > NOW else None
        for_s = held.for_s(key)
        if for_s is None and until_s is None:
            return index, wait_s
        soonest = max(s for s in (until_s, for_s) if s is not None)
        wait_s = min(wait_s, soonest)
    return len(keys), wait_s


_KEY = st.tuples(st.integers(1, 4), st.integers(7, 8))
_SECONDS = st.floats(0.001, 2.0)


@given(
    keys=st.lists(_KEY, min_size=1, max_size=8, unique=True),
    notes=st.lists(st.tuples(_KEY, st.sampled_from(["tenant", "provider", "pair"]), _SECONDS)),
    offsets=st.dictionaries(_KEY, st.floats(-1.0, 2.0)),
    start=st.integers(0, 8),
    wait_s=_SECONDS,
)
def test_held_buckets_skip_follows_its_rule(
    keys: list[tuple[int, int]],
    notes: list[tuple[tuple[int, int], str, float]],
    offsets: dict[tuple[int, int], float],
    start: int,
    wait_s: float,
) -> None:
    """Whichever way ``skip`` goes (key by key, or past every key once all the round's
    providers are held), its answer is the rule's."""
    keys = sorted(keys)
    start = min(start, len(keys))
    held = _held(frozenset(k[1] for k in keys), notes)
    not_before = {key: NOW + offset for key, offset in offsets.items()}
    expected = _skip_by_the_rule(held, keys, start, not_before, wait_s)
    assert held.skip(keys, start, not_before, NOW, wait_s) == expected


@given(
    keys=st.lists(_KEY, min_size=1, max_size=8, unique=True),
    refills=st.dictionaries(st.integers(7, 8), _SECONDS, min_size=1),
    offsets=st.dictionaries(_KEY, st.floats(-1.0, 2.0)),
    start=st.integers(0, 8),
    wait_s=_SECONDS,
)
def test_held_buckets_skip_past_held_providers_follows_its_rule(
    keys: list[tuple[int, int]],
    refills: dict[int, float],
    offsets: dict[tuple[int, int], float],
    start: int,
    wait_s: float,
) -> None:
    """Only providers' buckets held, often all of the round's: the way past every key."""
    keys = sorted(keys)
    start = min(start, len(keys))
    notes = [((1, provider), "provider", refill_s) for provider, refill_s in refills.items()]
    held = _held(frozenset(k[1] for k in keys), notes)
    not_before = {key: NOW + offset for key, offset in offsets.items()}
    expected = _skip_by_the_rule(held, keys, start, not_before, wait_s)
    assert held.skip(keys, start, not_before, NOW, wait_s) == expected
