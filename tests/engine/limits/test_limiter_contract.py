"""One contract for every ``Limiter``: the same tests on ``LocalLimiter`` and ``RedisLimiter``.

Redis keeps time with its own clock, so these tests run on real time: they leave headroom
around whole tokens (slow rates, ``approx``) and use short sleeps where time must pass.
The table-driven, instant-by-instant checks of the arithmetic are in ``test_local_limiter``.

Tests on Redis skip with a reason when no server answers at ``OMNIPOST_TEST_REDIS``, except
under CI (``CI`` set), where they fail instead. Each uses its own key prefix and deletes its
keys afterwards; the server is shared, so nothing here flushes or restarts it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest

from engine.core.clock import SystemClock
from engine.core.domain import BucketKey, Limit
from engine.limits.limiter import Limiter, Reservation
from engine.limits.local_limiter import LocalLimiter
from engine.limits.redis_limiter import RedisLimiter
from testkit.redis_limiters import REDIS_URL, delete_prefix, new_prefix, redis_client_or_skip

TENANT, PROVIDER, PAIR = SEND = BucketKey.for_send("acme", "mailgun")
OTHER = BucketKey.for_tenant("globex")
CLOSE = 0.1  # seconds that may pass between two calls on a busy machine (or tokens, at 1/s)


MakeLimiter = Callable[[], Awaitable[Limiter]]


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
async def make_limiter(request: pytest.FixtureRequest) -> AsyncIterator[MakeLimiter]:
    """Makes limiters that share one set of buckets: one process's LocalLimiter, or
    RedisLimiters (each with its own client, as separate processes would have) on one prefix."""
    made: list[Limiter] = []
    if request.param == "local":
        shared = LocalLimiter(SystemClock())

        async def make_local() -> Limiter:
            return shared

        yield make_local
        return

    client = await redis_client_or_skip()
    prefix = new_prefix()

    async def make_redis() -> Limiter:
        limiter = RedisLimiter(REDIS_URL, clock=SystemClock(), prefix=prefix)
        made.append(limiter)
        return limiter

    try:
        yield make_redis
        for limiter in made:
            assert isinstance(limiter, RedisLimiter)
            assert limiter.backend == "redis", "the limiter fell back: see the WARNING logged"
    finally:
        for limiter in made:
            await limiter.aclose()
        await delete_prefix(client, prefix)
        await client.aclose()


@pytest.fixture
async def limiter(make_limiter: MakeLimiter) -> Limiter:
    return await make_limiter()


async def configured(limiter: Limiter, limits: dict[BucketKey, Limit]) -> Limiter:
    for key, limit in limits.items():
        await limiter.configure(key, limit)
    return limiter


async def tokens(limiter: Limiter) -> dict[BucketKey, float]:
    return {level.key: level.tokens for level in await limiter.levels()}


def near(expected: dict[BucketKey, float]) -> dict[BucketKey, object]:
    return {key: pytest.approx(value, abs=CLOSE) for key, value in expected.items()}


pytestmark = pytest.mark.timeout(30)


async def test_keys_without_a_limit_are_unlimited(limiter: Limiter) -> None:
    await configured(limiter, {OTHER: Limit(1.0, 1.0)})
    for _ in range(3):
        reservation = await limiter.reserve(SEND, 1_000_000)
        assert (reservation.keys, reservation.granted, reservation.wait_s) == (SEND, 1_000_000, 0)
    [level] = await limiter.levels()
    assert (level.key, level.burst, level.rate_per_s) == (OTHER, 1.0, 1.0)
    assert level.tokens == pytest.approx(1.0)


@pytest.mark.parametrize("n", [0, -3])
async def test_asking_for_nothing_grants_nothing_and_takes_nothing(
    limiter: Limiter, n: int
) -> None:
    await configured(limiter, {TENANT: Limit(1.0, 2.0)})
    reservation = await limiter.reserve(SEND, n)
    assert (reservation.granted, reservation.wait_s) == (0, 0.0)
    assert await tokens(limiter) == {TENANT: 2.0}


async def test_one_empty_bucket_means_none_is_debited(limiter: Limiter) -> None:
    await configured(
        limiter, {TENANT: Limit(1.0, 5.0), PROVIDER: Limit(0.5, 3.0), PAIR: Limit(0.5, 1.0)}
    )
    assert (await limiter.reserve([PAIR], 1)).granted == 1
    reservation = await limiter.reserve(SEND, 1)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(2.0, abs=CLOSE)
    assert await tokens(limiter) == near({TENANT: 5.0, PROVIDER: 3.0, PAIR: 0.0})


# Tenant 1/s burst 5, provider 0.5/s burst 3, no pair limit: (n, granted, wait_s, left).
PARTIALS = [
    (2, 2, 0.0, {TENANT: 3.0, PROVIDER: 1.0}),
    (3, 3, 0.0, {TENANT: 2.0, PROVIDER: 0.0}),
    (4, 3, 2.0, {TENANT: 2.0, PROVIDER: 0.0}),
    (99, 3, 2.0, {TENANT: 2.0, PROVIDER: 0.0}),
]


@pytest.mark.parametrize(("n", "granted", "wait_s", "left"), PARTIALS)
async def test_grants_what_every_bucket_allows(
    limiter: Limiter, n: int, granted: int, wait_s: float, left: dict[BucketKey, float]
) -> None:
    await configured(limiter, {TENANT: Limit(1.0, 5.0), PROVIDER: Limit(0.5, 3.0)})
    reservation = await limiter.reserve(SEND, n)
    assert (reservation.keys, reservation.granted) == (SEND, granted)
    assert reservation.wait_s == pytest.approx(wait_s, abs=CLOSE)
    assert await tokens(limiter) == near(left)


async def test_a_key_named_twice_is_debited_once(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 4.0)})
    reservation = await limiter.reserve([TENANT, PROVIDER, TENANT], 3)
    assert (reservation.keys, reservation.granted) == ((TENANT, PROVIDER), 3)
    assert await tokens(limiter) == near({TENANT: 1.0})
    await limiter.refund(reservation, 2)
    assert await tokens(limiter) == near({TENANT: 3.0})


# Tenant 0.5/s burst 5 and provider 0.5/s burst 3, 3 reserved: (refund n, tokens after).
REFUNDS = [
    (1, {TENANT: 3.0, PROVIDER: 1.0}),
    (3, {TENANT: 5.0, PROVIDER: 3.0}),
    (9, {TENANT: 5.0, PROVIDER: 3.0}),  # never more than was granted
    (0, {TENANT: 2.0, PROVIDER: 0.0}),
    (-2, {TENANT: 2.0, PROVIDER: 0.0}),
]


@pytest.mark.parametrize(("n", "left"), REFUNDS)
async def test_refund(limiter: Limiter, n: int, left: dict[BucketKey, float]) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 5.0), PROVIDER: Limit(0.5, 3.0)})
    reservation = await limiter.reserve(SEND, 3)
    await limiter.refund(reservation, n)
    assert await tokens(limiter) == near(left)


async def test_a_refund_never_fills_past_the_burst(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(50.0, 4.0)})
    reservation = await limiter.reserve([TENANT], 2)
    await asyncio.sleep(0.1)  # refilled to the burst meanwhile
    await limiter.refund(reservation, 2)
    assert await tokens(limiter) == {TENANT: 4.0}


async def test_refund_skips_removed_and_blocked_buckets(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 5.0), PROVIDER: Limit(0.5, 3.0)})
    reservation = await limiter.reserve(SEND, 2)
    await limiter.configure(TENANT, None)
    await limiter.block(PROVIDER, 10.0)
    await limiter.refund(reservation, 2)
    assert await tokens(limiter) == {PROVIDER: 0.0}


RETAKES = [
    (1, 1, {TENANT: 4.0, PROVIDER: 2.0}),
    (3, 3, {TENANT: 2.0, PROVIDER: 0.0}),
    (7, 3, {TENANT: 2.0, PROVIDER: 0.0}),  # all it gave back, and no more: the provider's 3
    (0, 0, {TENANT: 5.0, PROVIDER: 3.0}),
]


@pytest.mark.parametrize(("n", "granted", "left"), RETAKES)
async def test_retake_gives_back_then_takes_again(
    limiter: Limiter, n: int, granted: int, left: dict[BucketKey, float]
) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 5.0), PROVIDER: Limit(0.5, 3.0)})
    reservation = await limiter.reserve(SEND, 3)
    again = await limiter.retake(reservation, n)
    assert (again.keys, again.granted) == (reservation.keys, granted)
    assert await tokens(limiter) == near(left)


async def test_retake_gives_nothing_to_a_blocked_bucket_and_takes_nothing_from_it(
    limiter: Limiter,
) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 5.0), PROVIDER: Limit(0.5, 3.0)})
    reservation = await limiter.reserve(SEND, 2)
    await limiter.block(PROVIDER, 10.0)
    again = await limiter.retake(reservation, 2)
    assert again.granted == 0
    assert again.wait_s == pytest.approx(12.0, abs=0.5)  # the block, then a token at 0.5/s
    assert await tokens(limiter) == near({TENANT: 5.0, PROVIDER: 0.0})


@pytest.mark.parametrize("batched", [True, False], ids=["retake_many", "retake"])
async def test_a_retake_after_the_bucket_refilled_gives_back_no_token_it_lost(
    limiter: Limiter, batched: bool
) -> None:
    """Five keys share a provider's bucket (50/s, burst 10) and reserve it empty; it refills
    to its burst while their claim runs; retaken, their ten tokens leave it empty again. Given
    back whole, each refund would find it full, and it would end at 8: tokens minted, sends
    past ``burst + rate * W`` (the excess that bench/workers.py saw at the provider)."""
    await configured(limiter, {PROVIDER: Limit(50.0, 10.0)})
    keys = [BucketKey.for_send(f"t{i}", "mailgun") for i in range(5)]
    first = await limiter.reserve_many([(send, 2) for send in keys])
    assert [got.granted for got in first] == [2] * 5
    await asyncio.sleep(0.3)  # 15 tokens' time: full again, 5 of them lost to the burst
    if batched:
        again = await limiter.retake_many([(got, 2) for got in first])
    else:
        again = [await limiter.retake(got, 2) for got in first]
    assert [got.granted for got in again] == [2] * 5
    assert (await tokens(limiter))[PROVIDER] == pytest.approx(0.0, abs=50 * CLOSE)


async def test_a_refund_after_others_took_gives_back_only_what_it_left_room_for(
    limiter: Limiter,
) -> None:
    """A reservation of 2 leaves a bucket of burst 10 at 8 (room 2); it refills meanwhile and
    another caller takes 9: the refund gives back what the bucket would hold had the 2 never
    been taken (room 2 less the refill), not 2 on top of what the other left."""
    await configured(limiter, {PROVIDER: Limit(20.0, 10.0)})
    first = await limiter.reserve([PROVIDER], 2)
    await asyncio.sleep(0.15)  # 3 tokens' time: full again, 1 of them lost
    assert (await limiter.reserve([PROVIDER], 9)).granted == 9
    await limiter.refund(first, 2)
    # Had the 2 never been taken: full, less the 9 = 1 (and what refilled since the take).
    assert (await tokens(limiter))[PROVIDER] == pytest.approx(1.0, abs=20 * CLOSE)


async def test_block_on_a_configured_key_holds_it_empty_then_refills(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(1.0, 5.0), PROVIDER: Limit(4.0, 4.0)})
    await limiter.block(PROVIDER, 0.3)
    reservation = await limiter.reserve(SEND, 2)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(0.55, abs=CLOSE)  # the block, then 1/rate
    [level, _] = await limiter.levels()
    assert (level.key, level.tokens) == (PROVIDER, 0.0)
    assert level.blocked_for_s == pytest.approx(0.3, abs=CLOSE)
    await asyncio.sleep(0.32)
    assert (await limiter.reserve(SEND, 2)).granted == 0  # empty, not full, when it ends
    await asyncio.sleep(0.6)
    assert (await limiter.reserve(SEND, 2)).granted == 2
    assert (await tokens(limiter))[TENANT] == pytest.approx(3.0, abs=CLOSE)


async def test_block_on_an_unconfigured_key_closes_it_for_that_time(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(1.0, 5.0)})
    await limiter.block(PAIR, 0.2)
    reservation = await limiter.reserve(SEND, 2)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(0.2, abs=CLOSE)
    assert (await limiter.reserve([OTHER], 1)).granted == 1  # other keys were never closed
    await asyncio.sleep(0.22)
    assert (await limiter.reserve(SEND, 2)).granted == 2
    assert (await limiter.reserve([PAIR], 100)).granted == 100


async def test_a_shorter_block_does_not_cut_a_longer_one_short(limiter: Limiter) -> None:
    await limiter.block(PAIR, 0.5)
    await limiter.block(PAIR, 0.05)
    await asyncio.sleep(0.1)
    reservation = await limiter.reserve([PAIR], 1)
    assert reservation.granted == 0
    assert 0 < reservation.wait_s <= 0.4 + 1e-3
    await limiter.block(PAIR, 0.8)  # a longer one extends it
    assert 0.8 - CLOSE < (await limiter.reserve([PAIR], 1)).wait_s <= 0.8 + 1e-3


@pytest.mark.parametrize("for_s", [0.0, -4.0])
async def test_a_block_of_no_time_only_drains(limiter: Limiter, for_s: float) -> None:
    await configured(limiter, {PROVIDER: Limit(0.5, 3.0)})
    await limiter.block(PROVIDER, for_s)
    await limiter.block(PAIR, for_s)
    reservation = await limiter.reserve(SEND, 1)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(2.0, abs=CLOSE)
    [level] = await limiter.levels()
    assert (level.key, level.blocked_for_s) == (PROVIDER, 0.0)
    assert (await limiter.reserve([PAIR], 5)).granted == 5


@pytest.mark.parametrize("for_s", [math.nan, math.inf])
async def test_a_block_must_be_finite(limiter: Limiter, for_s: float) -> None:
    await configured(limiter, {PROVIDER: Limit(1.0, 3.0)})
    with pytest.raises(ValueError, match="finite"):
        await limiter.block(PROVIDER, for_s)
    assert await tokens(limiter) == {PROVIDER: 3.0}


async def test_live_reconfigure_keeps_the_level_and_applies_the_new_rate(
    limiter: Limiter,
) -> None:
    await configured(limiter, {TENANT: Limit(0.5, 10.0)})
    assert (await limiter.reserve([TENANT], 8)).granted == 8
    await limiter.configure(TENANT, Limit(0.5, 20.0))  # level kept, not refilled to the burst
    assert await tokens(limiter) == near({TENANT: 2.0})
    await limiter.configure(TENANT, Limit(0.5, 1.0))  # clamped to the new burst
    assert await tokens(limiter) == near({TENANT: 1.0})
    await limiter.configure(TENANT, Limit(0.5, 50.0))
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    start = time.monotonic()
    await limiter.configure(TENANT, Limit(40.0, 50.0))
    await asyncio.sleep(0.1)
    [level] = await limiter.levels()
    elapsed = time.monotonic() - start
    assert (level.rate_per_s, level.burst) == (40.0, 50.0)
    assert 40.0 * 0.1 - 0.5 <= level.tokens <= 40.0 * elapsed + 0.5  # the new rate, not 0.5/s


async def test_a_change_made_through_one_limiter_reaches_the_others(
    make_limiter: MakeLimiter,
) -> None:
    first, second = await make_limiter(), await make_limiter()
    await first.configure(TENANT, Limit(0.5, 3.0))
    assert (await second.reserve([TENANT], 5)).granted == 3
    assert (await first.reserve([TENANT], 1)).granted == 0
    await second.configure(TENANT, None)
    assert (await first.reserve([TENANT], 5)).granted == 5
    assert await first.levels() == []


async def test_configure_adds_full_and_none_removes(limiter: Limiter) -> None:
    await limiter.configure(PAIR, Limit(0.5, 2.0))
    reservation = await limiter.reserve(SEND, 5)
    assert reservation.granted == 2
    assert reservation.wait_s == pytest.approx(2.0, abs=CLOSE)
    await limiter.configure(PAIR, None)
    await limiter.configure(PAIR, None)  # removing twice is fine
    assert (await limiter.reserve(SEND, 5)).granted == 5
    assert await limiter.levels() == []


async def test_configure_many_is_configure_in_turn_over_many_keys(limiter: Limiter) -> None:
    tenants = [BucketKey.for_tenant(f"t{i:04d}") for i in range(1200)]  # over a Redis chunk
    await limiter.configure_many([(key, Limit(1.0, 3.0)) for key in tenants])
    await limiter.configure_many([(tenants[0], None), (tenants[1], Limit(2.0, 5.0))])
    levels = {lv.key: lv for lv in await limiter.levels()}
    assert len(levels) == 1199 and tenants[0] not in levels
    assert (levels[tenants[1]].burst, levels[tenants[1]].rate_per_s) == (5.0, 2.0)
    assert {(lv.tokens, lv.burst) for k, lv in levels.items() if k != tenants[1]} == {(3.0, 3.0)}
    assert (await limiter.reserve([tenants[2]], 5)).granted == 3
    await limiter.configure_many([])


async def test_levels_are_sorted_by_key_and_show_blocks(limiter: Limiter) -> None:
    await configured(
        limiter, {PAIR: Limit(1.0, 2.0), OTHER: Limit(2.0, 4.0), TENANT: Limit(3.0, 6.0)}
    )
    await limiter.block(PAIR, 1.5)
    levels = await limiter.levels()
    assert [level.key for level in levels] == sorted([PAIR, TENANT, OTHER])
    assert [(lv.tokens, lv.burst, lv.rate_per_s) for lv in levels] == [
        (0.0, 2.0, 1.0),
        (6.0, 6.0, 3.0),
        (4.0, 4.0, 2.0),
    ]
    assert [lv.blocked_for_s for lv in levels] == [pytest.approx(1.5, abs=CLOSE), 0.0, 0.0]


@pytest.mark.slow
async def test_what_is_granted_stays_inside_the_envelope(make_limiter: MakeLimiter) -> None:
    """Four tasks on two limiters (two processes, for Redis) ask as fast as they can for
    1.5 s at 200/s burst 20: together they get at most burst + rate * elapsed + 1, and at
    least 80% of it."""
    limiters = [await make_limiter(), await make_limiter()]
    await configured(limiters[0], {PROVIDER: Limit(200.0, 20.0)})
    granted = 0
    start = time.monotonic()
    deadline = start + 1.5

    async def hammer(limiter: Limiter) -> None:
        nonlocal granted
        while time.monotonic() < deadline:
            reservation = await limiter.reserve(SEND, 3)
            granted += reservation.granted
            if reservation.granted < 3:
                await asyncio.sleep(min(reservation.wait_s, 0.005))

    await asyncio.gather(*(hammer(limiters[i % 2]) for i in range(4)))
    elapsed = time.monotonic() - start
    bound = 20 + 200 * elapsed + 1
    assert 0.8 * bound <= granted <= bound


async def test_a_block_outlives_removing_and_adding_the_limit(limiter: Limiter) -> None:
    await configured(limiter, {PROVIDER: Limit(4.0, 4.0)})
    await limiter.block(PROVIDER, 0.4)
    await limiter.configure(PROVIDER, None)  # removed: no bucket, but the key stays closed
    assert await limiter.levels() == []
    reservation = await limiter.reserve(SEND, 1)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(0.4, abs=CLOSE)
    await limiter.configure(PROVIDER, Limit(4.0, 4.0))  # added again: full, yet still closed
    [level] = await limiter.levels()
    assert level.blocked_for_s == pytest.approx(0.4, abs=CLOSE)
    assert (await limiter.reserve(SEND, 1)).granted == 0
    await asyncio.sleep(0.45)
    assert (await limiter.reserve(SEND, 4)).granted == 4


# -- batches: reserve_many, retake_many and refund_many are the single calls in order ----------
#
# Each case runs twice on the same limiter, on two copies of its buckets (every tenant and
# provider renamed into its own space): once one call at a time, once as a batch. The answers
# must be the same (wait_s within CLOSE: Redis's clock runs between the two), and so must the
# levels left; the grants are also checked against the table. Rates are slow (0.01/s), so the
# time between calls adds no whole token.

Ask = tuple[tuple[BucketKey, ...], int]
A = SEND  # acme through mailgun
B = BucketKey.for_send("globex", "mailgun")  # another tenant, the same provider
C = BucketKey.for_send("acme", "ses")  # the same tenant, another provider
SLOW = 0.01


def spaced(space: str, key: BucketKey) -> BucketKey:
    """``key`` with its tenant and provider renamed into ``space``."""
    tenant = f"{space}-{key.tenant}" if key.tenant else ""
    provider = f"{space}-{key.provider}" if key.provider else ""
    return BucketKey(key.scope, tenant, provider)


def unspaced(key: BucketKey) -> BucketKey:
    tenant = key.tenant.split("-", 1)[1] if key.tenant else ""
    provider = key.provider.split("-", 1)[1] if key.provider else ""
    return BucketKey(key.scope, tenant, provider)


def keys_in(space: str, keys: Sequence[BucketKey]) -> tuple[BucketKey, ...]:
    return tuple(spaced(space, key) for key in keys)


async def set_up(
    limiter: Limiter, space: str, bursts: dict[BucketKey, float], blocks: dict[BucketKey, float]
) -> None:
    for key, burst in bursts.items():
        await limiter.configure(spaced(space, key), Limit(SLOW, burst))
    for key, for_s in blocks.items():
        await limiter.block(spaced(space, key), for_s)


def answer(got: Reservation, *, close: bool = False) -> tuple[object, ...]:
    """What a reservation says, its keys out of their space, and its type and era (Redis's);
    with ``close``, its times within ``CLOSE`` (to compare with another's)."""

    def near_it(value: object) -> object:
        return pytest.approx(value, abs=CLOSE) if close else value

    return (
        type(got),
        tuple(unspaced(key) for key in got.keys),
        got.granted,
        near_it(got.wait_s),
        tuple(unspaced(key) for key in got.held_by),
        near_it(got.held_for_s),
        getattr(got, "era", None),
    )


async def left(limiter: Limiter, space: str) -> dict[BucketKey, float]:
    """The tokens in ``space``'s buckets, by key out of their space."""
    return {
        unspaced(level.key): level.tokens
        for level in await limiter.levels()
        if (level.key.tenant or level.key.provider).startswith(f"{space}-")
    }


# (bursts, blocks, asks, granted): every bucket at 0.01/s.
RESERVE_BATCHES = {
    "a later ask sees an earlier one's take": (
        {PROVIDER: 5.0},
        {},
        [(A, 3), (B, 3), (A, 1)],
        [3, 2, 0],
    ),
    "all or nothing per token across buckets": (
        {TENANT: 2.0, PROVIDER: 10.0},
        {},
        [(A, 5), ((PROVIDER,), 10), (C, 1)],
        [2, 8, 0],
    ),
    "keys without a limit are unlimited": (
        {OTHER: 1.0},
        {},
        [(A, 1_000_000), (B, 2), (B, 1), (A, 1_000_000)],
        [1_000_000, 1, 0, 1_000_000],
    ),
    "a blocked key grants nothing, and only its sends": (
        {TENANT: 4.0},
        {PAIR: 10.0},
        [(A, 2), (C, 2), (C, 3), (A, 1)],
        [0, 2, 2, 0],
    ),
    "nothing asked, and a key named twice": (
        {TENANT: 3.0},
        {},
        [(A, 0), (A, -1), ((TENANT, PROVIDER, TENANT), 2), (A, 2)],
        [0, 0, 2, 1],
    ),
    "the same keys again and again": (
        {PROVIDER: 3.0, PAIR: 10.0},
        {},
        [(A, 1)] * 5,
        [1, 1, 1, 0, 0],
    ),
}


@pytest.mark.parametrize(
    ("bursts", "blocks", "asks", "granted"),
    list(RESERVE_BATCHES.values()),
    ids=list(RESERVE_BATCHES),
)
async def test_reserve_many_is_reserve_for_each_ask_in_turn(
    limiter: Limiter,
    bursts: dict[BucketKey, float],
    blocks: dict[BucketKey, float],
    asks: list[Ask],
    granted: list[int],
) -> None:
    for space in ("one", "all"):
        await set_up(limiter, space, bursts, blocks)
    one = [await limiter.reserve(keys_in("one", keys), n) for keys, n in asks]
    batch = await limiter.reserve_many([(keys_in("all", keys), n) for keys, n in asks])
    assert [got.granted for got in one] == granted
    assert [answer(got) for got in batch] == [answer(got, close=True) for got in one]
    assert await left(limiter, "all") == near(await left(limiter, "one"))


# (bursts, first asks reserved one by one, blocks set after them, retakes (which, n), granted).
RETAKE_BATCHES = {
    "gives back then takes again": (
        {TENANT: 5.0, PROVIDER: 3.0},
        [(A, 3)],
        {},
        [(0, 1)],
        [1],
    ),
    "a later retake sees what an earlier one gave back and took": (
        {PROVIDER: 4.0},
        [(A, 2), (B, 2)],
        {},
        [(0, 0), (1, 4)],
        [0, 4],
    ),
    "no more than its buckets allow": (
        {TENANT: 5.0, PROVIDER: 3.0},
        [(A, 3), (C, 1)],
        {},
        [(0, 7), (1, 9)],
        [3, 2],
    ),
    "a blocked bucket is given nothing and takes nothing": (
        {TENANT: 5.0, PROVIDER: 3.0},
        [(A, 2), (C, 1)],
        {PROVIDER: 10.0},
        [(0, 2), (1, 3)],
        [0, 3],
    ),
}


@pytest.mark.parametrize(
    ("bursts", "first", "blocks", "retakes", "granted"),
    list(RETAKE_BATCHES.values()),
    ids=list(RETAKE_BATCHES),
)
async def test_retake_many_is_retake_for_each_in_turn(
    limiter: Limiter,
    bursts: dict[BucketKey, float],
    first: list[Ask],
    blocks: dict[BucketKey, float],
    retakes: list[tuple[int, int]],
    granted: list[int],
) -> None:
    made: dict[str, list[Reservation]] = {}
    for space in ("one", "all"):
        await set_up(limiter, space, bursts, {})
        made[space] = [await limiter.reserve(keys_in(space, keys), n) for keys, n in first]
        await set_up(limiter, space, {}, blocks)
    one = [await limiter.retake(made["one"][i], n) for i, n in retakes]
    batch = await limiter.retake_many([(made["all"][i], n) for i, n in retakes])
    assert [got.granted for got in one] == granted
    assert [answer(got) for got in batch] == [answer(got, close=True) for got in one]
    assert await left(limiter, "all") == near(await left(limiter, "one"))


# (bursts, first asks, blocks, a bucket removed after them (or None), refunds (which, n), left).
REFUND_BATCHES = {
    "each gives back what it says, never more than granted": (
        {TENANT: 5.0, PROVIDER: 6.0},
        [(A, 3), (B, 2)],
        {},
        None,
        [(0, 1), (1, 9), (0, -2), (1, 0), (0, 1)],
        {TENANT: 4.0, PROVIDER: 5.0},
    ),
    "a blocked bucket stays empty and a removed one is left alone": (
        {TENANT: 5.0, PROVIDER: 3.0, OTHER: 2.0},
        [(A, 2), ((OTHER,), 2)],
        {PROVIDER: 10.0},
        OTHER,
        [(0, 2), (1, 2)],
        {TENANT: 5.0, PROVIDER: 0.0},
    ),
}


@pytest.mark.parametrize(
    ("bursts", "first", "blocks", "removed", "refunds", "after"),
    list(REFUND_BATCHES.values()),
    ids=list(REFUND_BATCHES),
)
async def test_refund_many_is_refund_for_each_in_turn(
    limiter: Limiter,
    bursts: dict[BucketKey, float],
    first: list[Ask],
    blocks: dict[BucketKey, float],
    removed: BucketKey | None,
    refunds: list[tuple[int, int]],
    after: dict[BucketKey, float],
) -> None:
    made: dict[str, list[Reservation]] = {}
    for space in ("one", "all"):
        await set_up(limiter, space, bursts, {})
        made[space] = [await limiter.reserve(keys_in(space, keys), n) for keys, n in first]
        await set_up(limiter, space, {}, blocks)
        if removed is not None:
            await limiter.configure(spaced(space, removed), None)
    for i, n in refunds:
        await limiter.refund(made["one"][i], n)
    await limiter.refund_many([(made["all"][i], n) for i, n in refunds])
    assert await left(limiter, "one") == near(after)
    assert await left(limiter, "all") == near(after)


async def test_an_empty_batch_answers_nothing_and_changes_nothing(limiter: Limiter) -> None:
    await configured(limiter, {TENANT: Limit(SLOW, 3.0)})
    assert await limiter.reserve_many([]) == []
    assert await limiter.retake_many([]) == []
    await limiter.refund_many([])
    assert await tokens(limiter) == near({TENANT: 3.0})


async def test_levels_of_some_keys_are_those_configured_among_them(limiter: Limiter) -> None:
    await configured(
        limiter, {PAIR: Limit(1.0, 2.0), OTHER: Limit(2.0, 4.0), TENANT: Limit(3.0, 6.0)}
    )
    await limiter.block(PAIR, 1.5)
    wanted = [OTHER, PROVIDER, PAIR, OTHER, BucketKey.for_tenant("nobody")]
    some = await limiter.levels(wanted)
    every = await limiter.levels()
    assert [level.key for level in some] == sorted([PAIR, OTHER])  # each once, sorted
    expected = [level for level in every if level.key in wanted]
    assert [(lv.key, lv.burst, lv.rate_per_s) for lv in some] == [
        (lv.key, lv.burst, lv.rate_per_s) for lv in expected
    ]
    assert [lv.tokens for lv in some] == [pytest.approx(lv.tokens, abs=CLOSE) for lv in expected]
    assert some[0].blocked_for_s == pytest.approx(1.5, abs=CLOSE)
    assert await limiter.levels([]) == []
    assert await limiter.levels([PROVIDER]) == []
    assert [lv.key for lv in await limiter.levels(None)] == [lv.key for lv in every]


async def test_a_reservation_held_short_names_the_bucket_that_ran_dry(limiter: Limiter) -> None:
    """A provider's bucket shared by many tenants ran dry: the dispatcher holds the provider's
    whole line on that, instead of asking each of its tenants again (on Redis too)."""
    await limiter.configure_many(
        [(PROVIDER, Limit(1.0, 2.0)), (TENANT, Limit(1.0, 5.0)), (OTHER, Limit(1.0, 1.0))]
    )
    full, by_provider = await limiter.reserve_many([(A, 2), (B, 1)])
    assert (full.granted, full.held_by, full.held_for_s) == (2, (), ())
    assert by_provider.granted == 0 and by_provider.held_by == (PROVIDER,)
    assert list(by_provider.held_for_s) == [pytest.approx(1.0, abs=CLOSE)]
    await limiter.configure(PROVIDER, None)
    [by_tenant] = await limiter.reserve_many([(B, 2)])
    assert (by_tenant.granted, by_tenant.held_by) == (1, (OTHER,))
    alone = await limiter.reserve(B, 1)
    assert (alone.granted, alone.held_by) == (0, (OTHER,))
