"""What only the Redis limiter has: its keys, fractions kept as strings, expiry, many processes,
falling back when Redis is away and coming back. The shared behaviour is in
``test_limiter_contract``. The server is shared: tests use their own prefix, never flush it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from engine.clock import SystemClock
from engine.domain import BucketKey, Limit
from engine.errors import ConfigError
from engine.redis_limiter import RedisLimiter
from tests.redis_server import RedisServer, redis_server_binary
from tests.support import missing
from tests.test_limiter_contract import (
    REDIS_URL,
    delete_prefix,
    new_prefix,
    redis_client_or_skip,
)

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]

TENANT, PROVIDER, PAIR = SEND = BucketKey.for_send("acme", "mailgun")
UNREACHABLE = "redis://127.0.0.1:1/0"

Make = Callable[..., Awaitable[RedisLimiter]]


@pytest.fixture
async def client() -> AsyncIterator[Redis]:
    """A client to the test server (skips without one) for looking at the keys directly."""
    c = await redis_client_or_skip()
    yield c
    await c.aclose()


@pytest.fixture
async def prefix(client: Redis) -> AsyncIterator[str]:
    p = new_prefix()
    yield p
    await delete_prefix(client, p)


@pytest.fixture
async def make(prefix: str) -> AsyncIterator[Make]:
    """RedisLimiters on the test's prefix, each with its own client (one per 'process')."""
    made: list[RedisLimiter] = []

    async def build(url: str = REDIS_URL, **kwargs: Any) -> RedisLimiter:
        kwargs.setdefault("prefix", prefix)
        limiter = RedisLimiter(url, clock=SystemClock(), **kwargs)
        made.append(limiter)
        return limiter

    yield build
    for limiter in made:
        await limiter.aclose()


async def keys_of(client: Redis, prefix: str) -> set[str]:
    return {key.decode() async for key in client.scan_iter(match=f"{prefix}:*")}


async def test_keys_carry_one_hash_tag_per_tenant_and_per_provider(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    for key in SEND:
        await limiter.configure(key, Limit(1.0, 5.0))
    await limiter.reserve(SEND, 1)
    await limiter.block(PAIR, 5.0)
    assert await keys_of(client, prefix) == {
        f"{prefix}:buckets",
        f"{prefix}:seeded",
        *(f"{prefix}:{{t:acme}}:tenant:{part}" for part in ("limit", "state")),
        *(f"{prefix}:{{t:acme}}:pair:mailgun:{part}" for part in ("limit", "state", "block")),
        *(f"{prefix}:{{p:mailgun}}:provider:{part}" for part in ("limit", "state")),
    }
    tenant_slot = key_slot(f"{prefix}:{{t:acme}}:tenant:limit".encode())
    assert key_slot(f"{prefix}:{{t:acme}}:pair:mailgun:block".encode()) == tenant_slot
    assert key_slot(f"{prefix}:{{p:mailgun}}:provider:limit".encode()) != tenant_slot


async def test_names_are_escaped_inside_the_tag(make: Make, client: Redis, prefix: str) -> None:
    odd = BucketKey.for_pair("a}b:c", "x{y")
    limiter = await make()
    await limiter.configure(odd, Limit(1.0, 2.0))
    assert f"{prefix}:{{t:a%7Db%3Ac}}:pair:x%7By:limit" in await keys_of(client, prefix)
    assert [level.key for level in await limiter.levels()] == [odd]


async def test_fractions_of_a_token_survive_the_round_trip(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(4.0, 3.0))
    assert (await limiter.reserve([TENANT], 3)).granted == 3
    await asyncio.sleep(0.35)
    reservation = await limiter.reserve([TENANT], 5)  # about 1.4 there: 1 granted, 0.4 kept
    assert reservation.granted == 1
    stored = await cast(
        Awaitable[str | None], client.hget(f"{prefix}:{{t:acme}}:tenant:state", "tokens")
    )
    assert stored is not None
    kept = float(stored)
    assert 0.3 < kept < 1  # the fraction was written, not truncated to 0
    assert reservation.wait_s == pytest.approx((1 - kept) / 4, abs=1e-9)  # and returned
    [level] = await limiter.levels()
    assert kept <= level.tokens < 1


async def test_state_expires_when_the_bucket_would_be_full_and_limits_never(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(10.0, 5.0))
    await limiter.reserve([TENANT], 5)
    state, limit = (f"{prefix}:{{t:acme}}:tenant:{part}" for part in ("state", "limit"))
    assert 250 < await client.pttl(state) <= 500  # 5 tokens at 10/s
    assert await client.pttl(limit) == -1
    await limiter.block(PAIR, 2.0)
    assert 1750 < await client.pttl(f"{prefix}:{{t:acme}}:pair:mailgun:block") <= 2000
    await limiter.block(TENANT, 1.0)
    assert 1250 < await client.pttl(state) <= 1500  # held empty 1 s, then 0.5 s to refill
    await limiter.configure(TENANT, Limit(1000.0, 5.0))
    await asyncio.sleep(1.1)
    assert await client.exists(state) == 0  # full again: nothing left to keep


async def test_a_limit_set_by_one_process_is_seen_by_another(
    make: Make, client: Redis, prefix: str
) -> None:
    first = await make()
    other_client = Redis.from_url(REDIS_URL, decode_responses=True)  # another process's client
    second = RedisLimiter(other_client, clock=SystemClock(), prefix=prefix)
    try:
        await first.configure(TENANT, Limit(0.5, 10.0))
        assert (await second.reserve([TENANT], 8)).granted == 8
        await second.configure(TENANT, Limit(0.5, 4.0))
        [level] = await first.levels()
        assert (level.burst, level.rate_per_s) == (4.0, 0.5)
        assert level.tokens == pytest.approx(2.0, abs=0.05)  # kept, not reset to the burst
        await second.aclose()  # the caller owns a client it passed in
        assert await other_client.ping()
    finally:
        await other_client.aclose()


async def test_a_script_missing_from_the_server_is_loaded_again(make: Make) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 2.0))
    for script in limiter._scripts.values():
        script.sha = (
            "0" * 40
        )  # as after SCRIPT FLUSH or a failover, without flushing a shared server
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    assert limiter.backend == "redis"


async def test_lost_data_is_seeded_again_from_what_the_process_knows(
    make: Make, client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(2.0, 5.0))
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    await delete_prefix(client, prefix)  # what a restart without persistence does to our keys
    with caplog.at_level(logging.WARNING, logger="engine.redis_limiter"):
        reservation = await limiter.reserve([TENANT], 5)
    assert reservation.granted == 0  # restored empty, not full, and not unlimited
    assert "lost the rate limits" in caplog.text
    assert [level.key for level in await limiter.levels()] == [TENANT]


async def test_falls_back_to_a_share_of_each_limit_when_redis_is_unreachable(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    workers = 4
    limiter = await make(UNREACHABLE, fallback_workers=lambda: workers)
    with caplog.at_level(logging.WARNING, logger="engine.redis_limiter"):
        await limiter.configure(PROVIDER, Limit(100.0, 20.0))
        assert (limiter.backend, limiter.degraded) == ("local-fallback", True)
        [level] = await limiter.levels()
        assert (level.rate_per_s, level.burst) == (25.0, 5.0)
        assert level.tokens == pytest.approx(0.0, abs=0.5)  # starts empty
        granted = 0
        start = time.monotonic()
        while time.monotonic() - start < 0.6:
            granted += (await limiter.reserve(SEND, 5)).granted
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - start
        await limiter.block(PAIR, 1.0)
        assert (await limiter.reserve(SEND, 1)).granted == 0
        await limiter.refund((await limiter.reserve([PROVIDER], 1)), 1)
    assert 0.8 * 25 * elapsed <= granted <= 25 * elapsed + 5 + 1
    assert caplog.text.count("is unavailable") == 1  # once per transition, not per call
    workers = 2
    [level] = await limiter.levels()
    assert level.rate_per_s == 50.0  # follows the live worker count


async def test_returns_to_redis_when_it_answers_again(
    make: Make, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await make(probe_s=0.3)
    observer = await make()
    await limiter.configure(TENANT, Limit(1.0, 10.0))
    assert (await limiter.reserve([TENANT], 1)).granted == 1

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("connection refused (simulated)")

    with caplog.at_level(logging.WARNING, logger="engine.redis_limiter"):
        monkeypatch.setattr(limiter._client, "execute_command", broken)
        assert (await limiter.reserve([TENANT], 5)).granted == 0  # local, and empty
        assert limiter.backend == "local-fallback"
        await limiter.configure(PROVIDER, Limit(1.0, 3.0))  # remembered, pushed on return
        await asyncio.sleep(0.35)
        await limiter.reserve([TENANT], 1)  # a probe that fails: still local
        assert limiter.degraded
        monkeypatch.undo()
        assert (await limiter.reserve([TENANT], 1)).granted == 0  # no probe due yet
        await asyncio.sleep(0.35)
        assert (await limiter.reserve([TENANT], 5)).granted == 5  # Redis's bucket again
    assert limiter.backend == "redis"
    assert [level.key for level in await observer.levels()] == sorted([TENANT, PROVIDER])
    assert "is unavailable" in caplog.text
    assert "answers again" in caplog.text


async def test_a_hung_redis_falls_back_within_the_call_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A paused Redis (SIGSTOP: connections open, nothing answers) is left after
    ``call_timeout_s``, not the socket timeout plus a retry; it is probed, bounded just the
    same, and used again once it answers. A private server: the shared one is never paused."""
    if redis_server_binary() is None:
        missing("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis")
    server.start()
    pid = server.pid
    assert pid is not None
    paused = False
    limiter = RedisLimiter(server.url, clock=SystemClock(), probe_s=0.3)  # call_timeout_s 0.5
    try:
        await limiter.configure(TENANT, Limit(1.0, 10.0))
        assert (await limiter.reserve([TENANT], 1)).granted == 1
        assert limiter.backend == "redis"

        os.kill(pid, signal.SIGSTOP)
        paused = True
        with caplog.at_level(logging.WARNING, logger="engine.redis_limiter"):
            start = time.monotonic()
            reservation = await limiter.reserve([TENANT], 5)
            assert time.monotonic() - start < 1.0
            assert limiter.backend == "local-fallback"
            assert reservation.granted == 0  # the local share starts empty
            assert "TimeoutError" in caplog.text

            start = time.monotonic()
            await limiter.reserve([TENANT], 1)  # no probe due: local, at once
            assert time.monotonic() - start < 0.1
            await asyncio.sleep(0.35)
            start = time.monotonic()
            await limiter.reserve([TENANT], 1)  # a probe, bounded too, that fails
            assert time.monotonic() - start < 1.0
            assert limiter.degraded

            os.kill(pid, signal.SIGCONT)
            paused = False
            await asyncio.sleep(0.35)
            await limiter.reserve([TENANT], 1)  # the next probe finds it
            assert limiter.backend == "redis"
            assert "answers again" in caplog.text
    finally:
        if paused:
            os.kill(pid, signal.SIGCONT)
        await limiter.aclose()
        server.stop()


def test_call_timeout_must_be_positive() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="call_timeout_s"):
            RedisLimiter(UNREACHABLE, clock=SystemClock(), call_timeout_s=bad)


async def test_a_redis_error_falls_back_instead_of_escaping(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    await client.set(f"{prefix}:{{t:acme}}:tenant:limit", "not a hash")
    reservation = await limiter.reserve(SEND, 2)  # WRONGTYPE inside the script
    assert (reservation.granted, limiter.backend) == (2, "local-fallback")


def test_a_url_it_cannot_use_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Redis URL"):
        RedisLimiter("http://127.0.0.1:6379", clock=SystemClock())


async def test_repr_shows_where_and_how(make: Make, prefix: str) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 2.0))
    text = repr(limiter)
    assert text.startswith("<RedisLimiter ") and ":6379/0 " in text
    assert text.endswith(f" prefix={prefix!r} backend=redis limits=1 pending=0>")
