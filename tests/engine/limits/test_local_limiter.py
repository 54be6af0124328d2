"""LocalLimiter: time stepped by hand through the ``*_at`` methods, and once through a clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.core.clock import FakeClock
from engine.core.domain import BucketKey, BucketLevel, Limit
from engine.core.errors import ConfigError
from engine.limits.envelope import worst_window
from engine.limits.limiter import Limiter, Reservation
from engine.limits.local_limiter import LocalLimiter

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


# -- batches: the single calls in turn, at one instant ------------------------------------------

GLOBEX = BucketKey.for_send("globex", "mailgun")


def test_reserve_many_at_is_reserve_at_for_each_ask_in_turn() -> None:
    """A table of asks at one instant: each sees what those before it took, held_by and all."""
    limits = {TENANT: Limit(1.0, 3.0), PROVIDER: Limit(2.0, 4.0), OTHER: Limit(0.5, 1.0)}
    rows = [  # (keys, n, the Reservation reserve_at gives at 0.0 after the rows above)
        (SEND, 2, Reservation(SEND, 2)),
        (GLOBEX, 3, Reservation(GLOBEX, 1, 2.0, (OTHER,), (2.0,))),  # its tenant's one
        (SEND, 2, Reservation(SEND, 1, 1.0, (TENANT, PROVIDER), (1.0, 0.5))),
        ((PAIR,), 10**6, Reservation((PAIR,), 10**6)),  # no limit
        (SEND, 0, Reservation(SEND, 0)),
        (SEND, 1, Reservation(SEND, 0, 1.0, (TENANT, PROVIDER), (1.0, 0.5))),
    ]
    one, batch = limiter_with(limits), limiter_with(limits)
    one.block_at(0.0, BucketKey.for_pair("globex", "mailgun"), 0.0)  # drains nothing: no limit
    for keys, n, expected in rows:
        got = one.reserve_at(0.0, keys, n)
        assert (got, got.held_by, got.held_for_s) == (
            expected,
            expected.held_by,
            expected.held_for_s,
        )
    answers = batch.reserve_many_at(0.0, [(keys, n) for keys, n, _ in rows])
    assert [(a, a.held_by, a.held_for_s) for a in answers] == [
        (e, e.held_by, e.held_for_s) for _, _, e in rows
    ]
    assert batch.levels_at(0.0) == one.levels_at(0.0)


def test_retake_and_refund_many_at_are_the_single_calls_in_turn() -> None:
    limits = {TENANT: Limit(1.0, 5.0), PROVIDER: Limit(1.0, 4.0)}
    one, batch = limiter_with(limits), limiter_with(limits)
    firsts = [(SEND, 2), (GLOBEX, 2), (SEND, 0)]  # the provider left empty
    mine, theirs = (lim.reserve_many_at(0.0, firsts) for lim in (one, batch))
    retakes = [(0, 0), (1, 4), (2, 1)]  # a refund; its two and the two given back; none left
    expected = [Reservation(SEND, 0), Reservation(GLOBEX, 4), Reservation(SEND, 0, 1.0)]
    assert [one.retake_at(0.0, mine[i], n) for i, n in retakes] == expected
    assert batch.retake_many_at(0.0, [(theirs[i], n) for i, n in retakes]) == expected
    assert batch.levels_at(0.0) == one.levels_at(0.0)
    one.block_at(0.5, TENANT, 1.0)
    batch.block_at(0.5, TENANT, 1.0)
    refunds = [(1, 1), (1, 9), (0, 3), (1, -1)]
    for i, n in refunds:
        one.refund_at(1.0, mine[i], n)
    batch.refund_many_at(1.0, [(theirs[i], n) for i, n in refunds])
    assert batch.levels_at(1.0) == one.levels_at(1.0)
    assert {lv.key: lv.tokens for lv in batch.levels_at(1.0)} == {TENANT: 0.0, PROVIDER: 4.0}


def test_levels_at_of_some_keys_looks_up_only_those() -> None:
    limiter = limiter_with({PAIR: Limit(1.0, 2.0), OTHER: Limit(2.0, 4.0), TENANT: Limit(3.0, 6.0)})
    limiter.block_at(0.0, PAIR, 1.5)
    every = limiter.levels_at(0.5)
    assert limiter.levels_at(0.5, [OTHER, PROVIDER, PAIR, OTHER]) == [every[0], every[2]]
    assert limiter.levels_at(0.5, []) == []
    assert limiter.levels_at(0.5, [BucketKey.for_tenant("nobody")]) == []


class CountingClock(FakeClock):
    """A FakeClock that moves 1 ms at every reading, and counts the readings."""

    readings = 0

    def monotonic(self) -> float:
        self.readings += 1
        self.advance(0.001)
        return super().monotonic()


async def test_a_batch_reads_the_clock_once_and_an_empty_one_not_at_all() -> None:
    clock = CountingClock(start=0.0)
    limiter = LocalLimiter(clock)
    await limiter.configure(TENANT, Limit(1.0, 2.0))
    asks = [(SEND, 1)] * 3
    before = clock.readings
    got = await limiter.reserve_many(asks)
    assert clock.readings == before + 1
    assert [r.granted for r in got] == [1, 1, 0]  # no refill between asks: one instant
    again = await limiter.retake_many([(got[0], 1), (got[2], 1)])
    assert [r.granted for r in again] == [1, 0]
    await limiter.refund_many([(got[1], 1)])
    assert clock.readings == before + 3
    assert await limiter.reserve_many([]) == []
    assert await limiter.retake_many([]) == []
    await limiter.refund_many([])
    assert clock.readings == before + 3


# Random batches on two limiters at the same instants: one makes the single calls, the other
# the batch calls; every answer (held_by and held_for_s included) and every level must agree.
KEYS = [
    *(BucketKey.for_tenant(t) for t in "ab"),
    *(BucketKey.for_provider(p) for p in "mn"),
    *(BucketKey.for_pair(t, p) for t in "ab" for p in "mn"),
]
SENDS = [BucketKey.for_send(t, p) for t in "ab" for p in "mn"]
LIMITS = st.dictionaries(
    st.sampled_from(KEYS),
    st.builds(Limit, st.sampled_from([0.5, 1.0, 4.0]), st.sampled_from([1.0, 2.0, 3.0, 5.0])),
)
BLOCKS = st.dictionaries(st.sampled_from(KEYS), st.sampled_from([0.0, 0.25, 1.0]), max_size=2)
ITEMS = st.lists(st.tuples(st.integers(0, 7), st.integers(-1, 6)), max_size=8)
BATCHES = st.lists(
    st.tuples(st.sampled_from(["reserve", "retake", "refund"]), ITEMS, st.integers(0, 4)),
    max_size=8,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(limits=LIMITS, blocks=BLOCKS, batches=BATCHES)
def test_batches_equal_the_single_calls_in_turn(
    limits: dict[BucketKey, Limit], blocks: dict[BucketKey, float], batches: list[Batch]
) -> None:
    one, many = limiter_with(limits), limiter_with(limits)
    for key, for_s in blocks.items():
        one.block_at(0.0, key, for_s)
        many.block_at(0.0, key, for_s)
    made: tuple[list[Reservation], list[Reservation]] = ([], [])
    now = 0.0
    for kind, items, dt8 in batches:
        now += dt8 / 8
        singly, batched = run_batch(one, many, now, kind, items, made)
        assert [said(r) for r in batched] == [said(r) for r in singly]
        assert many.levels_at(now) == one.levels_at(now)


Batch = tuple[str, list[tuple[int, int]], int]


def said(got: Reservation) -> tuple[object, ...]:
    return (got, got.held_by, got.held_for_s)


def run_batch(
    one: LocalLimiter,
    many: LocalLimiter,
    now: float,
    kind: str,
    items: list[tuple[int, int]],
    made: tuple[list[Reservation], list[Reservation]],
) -> tuple[list[Reservation], list[Reservation]]:
    """One batch of ``kind``, singly on ``one`` and as a batch on ``many``; items name a send
    (reserve) or an earlier reservation (retake, refund), modulo how many there are."""
    mine, theirs = made
    if kind == "reserve":
        asks = [(SENDS[i % len(SENDS)], n) for i, n in items]
        singly = [one.reserve_at(now, keys, n) for keys, n in asks]
        batched = many.reserve_many_at(now, asks)
    elif not mine:
        return [], []
    else:
        chosen = [(i % len(mine), n) for i, n in items]
        if kind == "retake":
            singly = [one.retake_at(now, mine[i], n) for i, n in chosen]
            batched = many.retake_many_at(now, [(theirs[i], n) for i, n in chosen])
        else:
            for i, n in chosen:
                one.refund_at(now, mine[i], n)
            many.refund_many_at(now, [(theirs[i], n) for i, n in chosen])
            return [], []
    mine += singly
    theirs += batched
    return singly, batched


# Claims as the dispatcher makes them: keys sharing a provider's bucket reserve together, a
# claim runs for a while, then each key retakes what it leased; some reservations are refunded
# instead (a probe refused). (keys reserving, n each, claim in 1/100 s, leased each, pause.)
CLAIMS = st.lists(
    st.tuples(
        st.integers(1, 6),
        st.integers(1, 4),
        st.integers(0, 30),
        st.integers(0, 4),
        st.integers(0, 30),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(claims=CLAIMS, refund_every=st.integers(2, 5))
@example(claims=[(5, 2, 30, 2, 0), (5, 2, 0, 2, 0)], refund_every=5)  # 18 in 0.01 s before
def test_tokens_kept_by_retakes_stay_inside_the_envelope(
    claims: list[tuple[int, int, int, int, int]], refund_every: int
) -> None:
    """The tokens kept (a retake's grants, at the retake) never exceed ``burst + rate * W`` in
    any window, however long the claims run and however often the bucket refills to its burst
    in between; the tokens of reservations given back are never counted."""
    limit = Limit(100.0, 10.0)
    limiter = limiter_with({PROVIDER: limit})
    now, kept = 0.0, []
    for turn, (keys, n, claim_cs, leased, pause_cs) in enumerate(claims, start=1):
        first = limiter.reserve_many_at(now, [((PROVIDER,), n)] * keys)
        now += claim_cs / 100
        if turn % refund_every == 0:
            limiter.refund_many_at(now, [(got, got.granted) for got in first])
        else:
            for got in limiter.retake_many_at(
                now, [(got, min(leased, got.granted)) for got in first]
            ):
                kept += [now] * got.granted
        now += pause_cs / 100
    for window_s in (0.01, 0.05, 0.2, 1.0):
        worst = worst_window(kept, window_s, limit.rate_per_s, limit.burst, edges=0.0)
        assert worst.holds, worst
