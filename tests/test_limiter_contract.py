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
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from engine.clock import SystemClock
from engine.domain import BucketKey, Limit
from engine.limiter import Limiter
from engine.local_limiter import LocalLimiter
from engine.redis_limiter import RedisLimiter
from tests.support import missing

REDIS_URL = os.environ.get("OMNIPOST_TEST_REDIS", "redis://127.0.0.1:6379/0")

TENANT, PROVIDER, PAIR = SEND = BucketKey.for_send("acme", "mailgun")
OTHER = BucketKey.for_tenant("globex")
CLOSE = 0.1  # seconds that may pass between two calls on a busy machine (or tokens, at 1/s)


async def redis_client_or_skip() -> Redis:
    """A client to the test server; skips (fails under CI) when it does not answer."""
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=1.0)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        missing(f"Redis is not reachable at {REDIS_URL}: {exc}")
    return client


async def delete_prefix(client: Redis, prefix: str) -> None:
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await client.delete(*keys)


def new_prefix() -> str:
    return f"omnipost-test-{uuid.uuid4().hex[:12]}"


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
