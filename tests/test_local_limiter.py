"""LocalLimiter: time stepped by hand through the ``*_at`` methods, and once through a clock."""

from __future__ import annotations

import math

import pytest

from engine.clock import FakeClock
from engine.domain import BucketKey, BucketLevel, Limit
from engine.errors import ConfigError
from engine.limiter import Limiter, Reservation
from engine.local_limiter import LocalLimiter

TENANT, PROVIDER, PAIR = SEND = BucketKey.for_send("acme", "mailgun")
OTHER = BucketKey.for_tenant("globex")


def limiter_with(limits: dict[BucketKey, Limit], now: float = 0.0) -> LocalLimiter:
    limiter = LocalLimiter(FakeClock(start=now))
    for key, limit in limits.items():
        limiter.configure_at(now, key, limit)
    return limiter


def tokens(limiter: LocalLimiter, now: float) -> dict[BucketKey, float]:
    return {level.key: level.tokens for level in limiter.levels_at(now)}


def test_keys_without_a_limit_are_unlimited() -> None:
    limiter = limiter_with({OTHER: Limit(1.0, 1.0)})
    for _ in range(3):
        assert limiter.reserve_at(0.0, SEND, 1_000_000) == Reservation(SEND, 1_000_000, 0.0)
    assert limiter.levels_at(0.0) == [BucketLevel(OTHER, 1.0, 1.0, 1.0)]


@pytest.mark.parametrize("n", [0, -3])
def test_asking_for_nothing_grants_nothing_and_takes_nothing(n: int) -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 2.0)})
    limiter.block_at(0.0, PROVIDER, 5.0)
    assert limiter.reserve_at(0.0, SEND, n) == Reservation(SEND, 0, 0.0)
    assert tokens(limiter, 0.0) == {TENANT: 2.0}


def test_one_empty_bucket_means_none_is_debited() -> None:
    limiter = limiter_with(
        {TENANT: Limit(10.0, 5.0), PROVIDER: Limit(1.0, 3.0), PAIR: Limit(0.5, 1.0)}
    )
    assert limiter.reserve_at(0.0, [PAIR], 1).granted == 1
    assert limiter.reserve_at(0.0, SEND, 1) == Reservation(SEND, 0, 2.0)
    assert tokens(limiter, 0.0) == {TENANT: 5.0, PROVIDER: 3.0, PAIR: 0.0}
    assert limiter.reserve_at(2.0, SEND, 1) == Reservation(SEND, 1, 0.0)
    assert tokens(limiter, 2.0) == {TENANT: 4.0, PROVIDER: 2.0, PAIR: 0.0}


# Tenant 10/s burst 5, provider 1/s burst 3, no pair limit: (n, granted, wait_s, left).
PARTIALS = [
    (2, 2, 0.0, {TENANT: 3.0, PROVIDER: 1.0}),
    (3, 3, 0.0, {TENANT: 2.0, PROVIDER: 0.0}),
    (4, 3, 1.0, {TENANT: 2.0, PROVIDER: 0.0}),
    (99, 3, 1.0, {TENANT: 2.0, PROVIDER: 0.0}),
]


@pytest.mark.parametrize(("n", "granted", "wait_s", "left"), PARTIALS)
def test_grants_what_every_bucket_allows(
    n: int, granted: int, wait_s: float, left: dict[BucketKey, float]
) -> None:
    limiter = limiter_with({TENANT: Limit(10.0, 5.0), PROVIDER: Limit(1.0, 3.0)})
    assert limiter.reserve_at(0.0, SEND, n) == Reservation(SEND, granted, wait_s)
    assert tokens(limiter, 0.0) == left


def test_wait_is_until_one_more_token_in_every_bucket() -> None:
    limiter = limiter_with({TENANT: Limit(2.0, 2.0), PROVIDER: Limit(4.0, 1.0)})
    assert limiter.reserve_at(0.0, SEND, 5) == Reservation(SEND, 1, 0.25)
    assert limiter.reserve_at(0.25, SEND, 5) == Reservation(SEND, 1, 0.25)
    assert limiter.reserve_at(0.5, SEND, 5) == Reservation(SEND, 1, 0.5)  # tenant is the slower
    assert limiter.reserve_at(0.75, SEND, 5) == Reservation(SEND, 0, 0.25)  # tenant has 0.5
    assert limiter.reserve_at(1.0, SEND, 5) == Reservation(SEND, 1, 0.5)


def test_whole_tokens_only() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 3.0)})
    assert limiter.reserve_at(0.0, [TENANT], 3).granted == 3
    assert limiter.reserve_at(1.5, [TENANT], 3) == Reservation((TENANT,), 1, 0.5)
    assert tokens(limiter, 1.5) == {TENANT: 0.5}


def test_a_key_named_twice_is_debited_once() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 4.0)})
    reservation = limiter.reserve_at(0.0, [TENANT, PROVIDER, TENANT], 3)
    assert reservation == Reservation((TENANT, PROVIDER), 3, 0.0)
    assert tokens(limiter, 0.0) == {TENANT: 1.0}
    limiter.refund_at(0.0, reservation, 2)
    assert tokens(limiter, 0.0) == {TENANT: 3.0}


# Tenant 1/s burst 5 and provider 1/s burst 3, 3 reserved at t=0: (refund n, at, tokens after).
REFUNDS = [
    (1, 0.0, {TENANT: 3.0, PROVIDER: 1.0}),
    (3, 0.0, {TENANT: 5.0, PROVIDER: 3.0}),
    (9, 0.0, {TENANT: 5.0, PROVIDER: 3.0}),  # never more than was granted
    (2, 1.0, {TENANT: 5.0, PROVIDER: 3.0}),  # clamped at burst
    (0, 0.0, {TENANT: 2.0, PROVIDER: 0.0}),
    (-2, 0.0, {TENANT: 2.0, PROVIDER: 0.0}),
]


@pytest.mark.parametrize(("n", "now", "left"), REFUNDS)
def test_refund(n: int, now: float, left: dict[BucketKey, float]) -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 5.0), PROVIDER: Limit(1.0, 3.0)})
    reservation = limiter.reserve_at(0.0, SEND, 3)
    limiter.refund_at(now, reservation, n)
    assert tokens(limiter, now) == left


def test_refund_skips_removed_and_blocked_buckets() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 5.0), PROVIDER: Limit(1.0, 3.0)})
    reservation = limiter.reserve_at(0.0, SEND, 2)
    limiter.configure_at(0.0, TENANT, None)
    limiter.block_at(0.0, PROVIDER, 10.0)
    limiter.refund_at(0.0, reservation, 2)
    assert tokens(limiter, 10.0) == {PROVIDER: 0.0}


def test_block_on_a_configured_key_holds_it_empty_then_refills() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 5.0), PROVIDER: Limit(2.0, 4.0)})
    limiter.block_at(0.0, PROVIDER, 5.0)
    assert limiter.reserve_at(0.0, SEND, 2) == Reservation(SEND, 0, 5.5)
    assert limiter.reserve_at(4.0, SEND, 2) == Reservation(SEND, 0, 1.5)
    assert limiter.reserve_at(5.0, SEND, 2) == Reservation(SEND, 0, 0.5)  # empty, not full
    assert limiter.reserve_at(6.0, SEND, 2) == Reservation(SEND, 2, 0.0)
    assert tokens(limiter, 6.0) == {TENANT: 3.0, PROVIDER: 0.0}  # tenant was never debited


def test_block_on_an_unconfigured_key_closes_it_for_that_time() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 5.0)})
    limiter.block_at(0.0, PAIR, 3.0)
    assert limiter.reserve_at(0.0, SEND, 2) == Reservation(SEND, 0, 3.0)
    assert limiter.reserve_at(2.5, SEND, 2) == Reservation(SEND, 0, 0.5)
    assert limiter.reserve_at(3.0, SEND, 2) == Reservation(SEND, 2, 0.0)
    assert limiter.reserve_at(3.0, [PAIR], 100).granted == 100
    assert limiter.reserve_at(0.0, [OTHER], 1).granted == 1  # other keys were never closed


def test_a_shorter_block_does_not_cut_a_longer_one_short() -> None:
    limiter = limiter_with({PROVIDER: Limit(1.0, 1.0)})
    limiter.block_at(0.0, PROVIDER, 10.0)
    limiter.block_at(1.0, PROVIDER, 2.0)
    assert limiter.reserve_at(5.0, [PROVIDER], 1) == Reservation((PROVIDER,), 0, 6.0)
    limiter.block_at(5.0, PROVIDER, 20.0)  # a longer one extends it
    assert limiter.reserve_at(11.0, [PROVIDER], 1) == Reservation((PROVIDER,), 0, 15.0)


@pytest.mark.parametrize("for_s", [0.0, -4.0])
def test_a_block_of_no_time_only_drains(for_s: float) -> None:
    limiter = limiter_with({PROVIDER: Limit(1.0, 3.0)})
    limiter.block_at(1.0, PROVIDER, for_s)
    limiter.block_at(1.0, PAIR, for_s)
    assert limiter.reserve_at(1.0, SEND, 1) == Reservation(SEND, 0, 1.0)
    assert limiter.levels_at(1.0) == [BucketLevel(PROVIDER, 0.0, 3.0, 1.0, 0.0)]


@pytest.mark.parametrize("for_s", [math.nan, math.inf])
def test_a_block_must_be_finite(for_s: float) -> None:
    limiter = limiter_with({PROVIDER: Limit(1.0, 3.0)})
    with pytest.raises(ValueError, match="finite"):
        limiter.block_at(0.0, PROVIDER, for_s)
    assert tokens(limiter, 0.0) == {PROVIDER: 3.0}


def test_live_reconfigure_keeps_the_level() -> None:
    limiter = limiter_with({TENANT: Limit(1.0, 10.0)})
    assert limiter.reserve_at(0.0, [TENANT], 8).granted == 8
    limiter.configure_at(2.0, TENANT, Limit(4.0, 10.0))  # 2 saved + 2 earned at the old rate
    assert tokens(limiter, 2.0) == {TENANT: 4.0}
    assert tokens(limiter, 3.0) == {TENANT: 8.0}
    limiter.configure_at(3.0, TENANT, Limit(4.0, 5.0))
    assert tokens(limiter, 3.0) == {TENANT: 5.0}
    limiter.configure_at(3.0, TENANT, Limit(4.0, 50.0))
    assert tokens(limiter, 3.0) == {TENANT: 5.0}


def test_configure_adds_full_and_none_removes() -> None:
    limiter = limiter_with({})
    limiter.configure_at(0.0, PAIR, Limit(1.0, 2.0))
    assert limiter.reserve_at(0.0, SEND, 5) == Reservation(SEND, 2, 1.0)
    limiter.configure_at(0.0, PAIR, None)
    limiter.configure_at(0.0, PAIR, None)  # removing twice is fine
    assert limiter.reserve_at(0.0, SEND, 5) == Reservation(SEND, 5, 0.0)
    assert limiter.levels_at(0.0) == []


def test_levels_are_sorted_by_key_and_show_blocks() -> None:
    limiter = limiter_with({PAIR: Limit(1.0, 2.0), OTHER: Limit(2.0, 4.0), TENANT: Limit(3.0, 6.0)})
    limiter.block_at(0.0, PAIR, 1.5)
    assert limiter.levels_at(0.5) == [
        BucketLevel(PAIR, 0.0, 2.0, 1.0, 1.0),
        BucketLevel(TENANT, 6.0, 6.0, 3.0, 0.0),
        BucketLevel(OTHER, 4.0, 4.0, 2.0, 0.0),
    ]
    assert [level.key for level in limiter.levels_at(0.5)] == sorted([PAIR, TENANT, OTHER])


async def test_async_methods_read_the_clock() -> None:
    clock = FakeClock(start=50.0)
    limiter: Limiter = LocalLimiter(clock)
    await limiter.configure(TENANT, Limit(2.0, 2.0))
    assert await limiter.reserve(SEND, 3) == Reservation(SEND, 2, 0.5)
    clock.advance(0.5)
    assert await limiter.reserve(SEND, 3) == Reservation(SEND, 1, 0.5)
    await limiter.refund(Reservation(SEND, 1), 1)
    await limiter.block(PROVIDER, 1.0)
    assert await limiter.levels() == [BucketLevel(TENANT, 1.0, 2.0, 2.0)]
    assert (await limiter.reserve(SEND, 1)).wait_s == 1.0
    clock.advance(1.0)
    assert (await limiter.reserve(SEND, 1)).granted == 1
    await limiter.configure(TENANT, None)
    assert await limiter.levels() == []
    await limiter.aclose()


async def test_an_invalid_limit_is_refused_before_it_reaches_the_limiter() -> None:
    with pytest.raises(ConfigError):
        await LocalLimiter(FakeClock()).configure(TENANT, Limit(0.0, 1.0))


def test_repr_shows_levels_and_blocks() -> None:
    clock = FakeClock(start=0.0)
    limiter = LocalLimiter(clock)
    limiter.configure_at(0.0, TENANT, Limit(1.0, 5.0))
    limiter.reserve_at(0.0, [TENANT], 2)
    limiter.block_at(0.0, PAIR, 2.0)
    assert repr(limiter) == (
        "<LocalLimiter buckets [tenant:acme 3.00/5] blocked [pair:acme/mailgun 2.0s]>"
    )
    clock.advance(2.0)
    assert repr(limiter) == "<LocalLimiter buckets [tenant:acme 5.00/5] blocked []>"


def test_a_reservation_at_the_instant_a_token_falls_due_is_granted() -> None:
    """1,000/s, burst 1, asked every 0.2 ms with the time summed step by step: every token
    refilled comes out (the float level reads a hair below 1 when each falls due), and never
    one more than the envelope. Two buckets (tenant and provider) at the same rate."""
    limiter = limiter_with({TENANT: Limit(1000.0, 1.0), PROVIDER: Limit(1000.0, 1.0)})
    now, granted = 0.0, 0
    for _ in range(5000):
        now += 0.0002
        granted += limiter.reserve_at(now, SEND, 1).granted
    assert math.floor(1000.0 * now + 1e-6) <= granted <= 1.0 + 1000.0 * now


def test_count_short_counts_which_buckets_held_each_grant_short() -> None:
    limiter = LocalLimiter(FakeClock(), count_short=True)
    limiter.configure_at(0.0, TENANT, Limit(1.0, 1.0))
    limiter.configure_at(0.0, PROVIDER, Limit(10.0, 3.0))
    other = BucketKey.for_send("globex", "mailgun")
    rows = [  # (now, keys, n, granted, held by)
        (0.0, SEND, 2, 1, (TENANT,)),  # the tenant's one token: short by the tenant
        (0.0, other, 5, 2, (PROVIDER,)),  # the provider's two left
        (0.0, SEND, 1, 0, (TENANT, PROVIDER)),  # both empty
        (0.1, SEND, 1, 0, (TENANT,)),  # the provider refilled one, the tenant none
        (0.2, other, 1, 1, ()),  # granted in full: not counted
    ]
    for now, keys, n, granted, held_by in rows:
        got = limiter.reserve_at(now, keys, n)
        assert (got.granted, got.held_by) == (granted, held_by)
    limiter.block_at(0.2, PROVIDER, 1.0)
    assert limiter.reserve_at(0.3, SEND, 1).held_by == (PROVIDER,)
    assert limiter.shorts() == {
        (TENANT, (TENANT,)): 2,
        (other[0], (PROVIDER,)): 1,
        (TENANT, (TENANT, PROVIDER)): 1,
        (TENANT, (PROVIDER,)): 1,  # the block, held by the provider for the tenant's send
    }
    assert LocalLimiter(FakeClock()).shorts() == {}  # not counted unless asked
