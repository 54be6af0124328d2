"""What only the Redis limiter has: its keys, fractions kept as strings, expiry, many processes,
falling back when Redis is away and coming back. The shared behaviour is in
``test_limiter_contract``. The server is shared: tests use their own prefix, never flush it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from engine.core.clock import FakeClock, SystemClock
from engine.core.domain import BucketKey, Limit
from engine.core.errors import ConfigError
from engine.limits.envelope import worst_span
from engine.limits.limiter import Reservation
from engine.limits.redis_batch import WHOLE_SET
from engine.limits.redis_calls import bounded
from engine.limits.redis_limiter import PEERS_EVERY_S, RedisLimiter
from testkit.redis_limiters import (
    PAIR,
    PROVIDER,
    REDIS_URL,
    SEND,
    TENANT,
    UNREACHABLE,
    Make,
    delete_prefix,
    is_fcall,
    lanes,
    new_prefix,
    redis_client_or_skip,
    unreachable,
)
from testkit.redis_server import RedisServer, redis_server_binary
from testkit.support import missing

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


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
        kwargs.setdefault("clock", SystemClock())
        limiter = RedisLimiter(url, **kwargs)
        made.append(limiter)
        return limiter

    yield build
    for limiter in made:
        await limiter.aclose()


async def keys_of(client: Redis, prefix: str) -> set[str]:
    return {key.decode() async for key in client.scan_iter(match=f"{prefix}:*")}


HASHES = {
    TENANT: "{t:acme}:tenant",
    PROVIDER: "{p:mailgun}:provider",
    PAIR: "{t:acme}:pair:mailgun",
}


async def test_one_hash_per_bucket_with_one_hash_tag_per_tenant_and_per_provider(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    for key in SEND:
        await limiter.configure(key, Limit(1.0, 5.0))
    await limiter.reserve(SEND, 1)
    await limiter.block(PAIR, 5.0)
    await limiter.block(BucketKey.for_pair("acme", "other"), 5.0)  # unconfigured: closed only
    names = {f"{prefix}:{name}" for name in HASHES.values()}
    other = f"{prefix}:{{t:acme}}:pair:other"
    assert set(await client.keys(f"{prefix}*")) == {
        name.encode()
        for name in {
            f"{prefix}:buckets:v2",
            f"{prefix}:seeded:v2",
            f"{prefix}:peers:v2",  # who reserved lately: the share to fall back to
            *names,
            other,
        }
    }
    for name in names:
        stored = await cast(Awaitable[dict[bytes, bytes]], client.hgetall(name))
        assert {b"rate", b"burst", b"tokens", b"stamp"} <= set(stored)
    pair = await cast(
        Awaitable[list[bytes | None]], client.hmget(names_of(prefix, PAIR), "tokens", "block_until")
    )
    assert pair[0] == b"0" and pair[1] is not None
    assert await cast(Awaitable[list[bytes]], client.hkeys(other)) == [b"block_until"]
    tenant_slot = key_slot(names_of(prefix, TENANT).encode())
    assert key_slot(names_of(prefix, PAIR).encode()) == tenant_slot
    assert key_slot(names_of(prefix, PROVIDER).encode()) != tenant_slot


def names_of(prefix: str, key: BucketKey) -> str:
    return f"{prefix}:{HASHES[key]}"


async def test_names_are_escaped_inside_the_tag(make: Make, client: Redis, prefix: str) -> None:
    odd = BucketKey.for_pair("a}b:c", "x{y")
    limiter = await make()
    await limiter.configure(odd, Limit(1.0, 2.0))
    assert f"{prefix}:{{t:a%7Db%3Ac}}:pair:x%7By" in await keys_of(client, prefix)
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
    stored = await cast(Awaitable[str | None], client.hget(names_of(prefix, TENANT), "tokens"))
    assert stored is not None
    kept = float(stored)
    assert 0.3 < kept < 1  # the fraction was written, not truncated to 0
    assert reservation.wait_s == pytest.approx((1 - kept) / 4, abs=1e-9)  # and returned
    [level] = await limiter.levels()
    assert kept <= level.tokens < 1


async def fields_of(client: Redis, name: str) -> set[str]:
    return {field.decode() for field in await cast(Awaitable[list[bytes]], client.hkeys(name))}


async def test_a_full_bucket_drops_its_level_and_only_a_bare_block_expires(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    tenant, pair = names_of(prefix, TENANT), names_of(prefix, PAIR)
    await limiter.configure(TENANT, Limit(10.0, 5.0))
    assert await fields_of(client, tenant) == {"rate", "burst"}  # full: no level stored
    await limiter.reserve([TENANT], 5)
    assert await fields_of(client, tenant) == {"rate", "burst", "tokens", "stamp"}
    await asyncio.sleep(0.6)  # full again (5 tokens at 10/s); the next write drops the level
    await limiter.refund(await limiter.reserve([TENANT], 1), 1)
    assert await fields_of(client, tenant) == {"rate", "burst"}
    assert await client.pttl(tenant) == -1  # a limit never expires
    await limiter.block(PAIR, 2.0)  # no limit: the hash holds the block and expires with it
    assert await fields_of(client, pair) == {"block_until"}
    assert 1750 < await client.pttl(pair) <= 2000
    await limiter.configure(PAIR, Limit(1.0, 1.0))  # a limit now: kept past the block
    assert await client.pttl(pair) == -1
    await limiter.configure(PAIR, None)  # removed while blocked: the block stays, and expires
    assert await fields_of(client, pair) == {"block_until"}
    assert 1500 < await client.pttl(pair) <= 2000
    other = BucketKey.for_pair("acme", "other")
    await limiter.configure(other, Limit(1.0, 1.0))
    await limiter.configure(other, None)  # not blocked: nothing left to keep
    await limiter.block(other, 0.0)  # a block of no time on a key without a limit: no write
    assert f"{prefix}:{{t:acme}}:pair:other" not in await keys_of(client, prefix)


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


async def test_a_whole_set_redis_holds_already_is_not_written_again(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's first load of the configuration (``WHOLE_SET`` limits or more) is skipped
    when Redis holds exactly that set; a change anywhere (a set that differs, one limit set by
    another process) is written."""
    limits: list[tuple[BucketKey, Limit | None]] = [
        (BucketKey.for_tenant(f"t{i}"), Limit(20.0, 10.0)) for i in range(WHOLE_SET + 200)
    ]
    first, second, third = await make(), await make(), await make()
    await first.configure_many(limits)
    await first.reserve([TENANT], 1)  # a first reservation on a fresh Redis seeds it: whole too
    written: list[int] = []
    for limiter in (second, third):
        real = limiter._calls.many

        async def counted(name: str, calls: Any, real: Any = real) -> list[Any]:
            written.append(len(calls))
            return cast(list[Any], await real(name, calls))

        monkeypatch.setattr(limiter._calls, "many", counted)
    await second.configure_many(list(reversed(limits)))  # the same set, in another order
    assert written == []
    some = BucketKey.for_tenant("t7")
    assert (await second.reserve([some], 3)).granted == 3  # Redis's bucket, as configured

    await first.configure(some, Limit(5.0, 2.0))  # one changed by another process
    await third.configure_many(limits)  # its view is older: written whole, and then it holds
    assert sum(written) == len(limits)
    changed = [(key, Limit(5.0, 2.0) if key == some else limit) for key, limit in limits]
    await second.configure_many(changed)
    assert sum(written) == 2 * len(limits)
    [level] = await first.levels([some])
    assert (level.rate_per_s, level.burst) == (5.0, 2.0)


async def test_a_whole_set_on_a_fresh_redis_is_written_once(
    make: Make, client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start on a fresh Redis: the whole set is written full and the seed marker set
    with it, so the first reservation finds Redis seeded (it seeded it again before: every
    limit written twice, about 1.5 s of a worker's CPU at 100,000 tenants)."""
    limits: list[tuple[BucketKey, Limit | None]] = [
        (BucketKey.for_tenant(f"t{i}"), Limit(20.0, 10.0)) for i in range(WHOLE_SET + 10)
    ]
    limiter = await make()
    written: list[int] = []
    real = limiter._calls.many

    async def counted(name: str, calls: Any) -> list[Any]:
        if name == "configure":
            written.append(len(calls))
        return await real(name, calls)

    monkeypatch.setattr(limiter._calls, "many", counted)
    await limiter.configure_many(limits)
    assert await client.get(f"{prefix}:seeded:v2") is not None
    assert (await limiter.reserve([BucketKey.for_tenant("t3")], 10)).granted == 10  # full
    assert sum(written) == len(limits)


async def test_a_process_writes_itself_into_the_peers_a_few_times_a_second_not_every_time(
    make: Make, client: Redis, prefix: str
) -> None:
    """The set of processes that reserved lately is written on a process's first reservation
    and then at most every ``PEERS_EVERY_S`` of its clock, not on each of its reservations."""
    clock = FakeClock(start=100.0)
    limiter = await make(clock=clock)
    await limiter.configure(TENANT, Limit(1000.0, 1000.0))
    peers = f"{prefix}:peers:v2"

    async def seen_at() -> float:
        rows = cast(list[tuple[bytes, float]], await client.zrange(peers, 0, -1, withscores=True))
        [(_, score)] = rows  # this process alone
        return float(score)

    assert (await limiter.reserve([TENANT], 1)).granted == 1
    first = await seen_at()
    await asyncio.sleep(0.02)  # Redis's clock moves on; this process's does not
    for _ in range(5):
        assert (await limiter.reserve([TENANT], 1)).granted == 1
    assert await seen_at() == first
    clock.advance(PEERS_EVERY_S)
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    assert await seen_at() > first


async def test_a_library_missing_from_the_server_is_loaded_again(make: Make, client: Redis) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 2.0))
    assert limiter._calls.uses_functions
    # as after FUNCTION FLUSH, a restart or a failover, without flushing a shared server
    await client.function_delete(limiter._calls.library)
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    assert limiter.backend == "redis"
    assert limiter._calls.uses_functions


async def test_a_call_on_a_connection_the_server_dropped_is_made_once_more(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 5.0))
    assert (await limiter.reserve([TENANT], 1)).granted == 1  # seeds a fresh prefix first
    failures = [RedisConnectionError("Connection closed by server.")]

    def drop_once(conn: Any) -> None:
        real_send = conn.send_packed_command

        async def send(command: Any, **kwargs: Any) -> None:
            if failures and is_fcall(command):
                raise failures.pop()
            await real_send(command, **kwargs)

        monkeypatch.setattr(conn, "send_packed_command", send)

    made = lanes(monkeypatch, limiter, drop_once)
    assert (await limiter.reserve([TENANT], 2)).granted == 2
    assert not failures  # the first try failed, a second one answered
    assert len(made) == 1 and made[0].is_connected  # connected again
    assert limiter.backend == "redis"


async def test_a_call_cancelled_before_its_reply_closes_the_connection(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply still on its way must never be read as the answer to the next call."""
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 5.0))
    sent = asyncio.Event()

    def note_send(conn: Any) -> None:
        real_send = conn.send_packed_command

        async def send(command: Any, **kwargs: Any) -> None:
            await real_send(command, **kwargs)
            if is_fcall(command):
                sent.set()
                await asyncio.sleep(1)  # the reply arrives; nobody reads it before the cancel

        monkeypatch.setattr(conn, "send_packed_command", send)

    assert (await limiter.reserve([TENANT], 1)).granted == 1  # seeds a fresh prefix first
    made = lanes(monkeypatch, limiter, note_send)
    pending = asyncio.create_task(limiter.reserve([TENANT], 2))
    await sent.wait()
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert not made[0].is_connected
    monkeypatch.undo()
    after = await limiter.reserve([TENANT], 5)  # the cancelled call's 2 were taken in Redis
    assert after.granted == 2
    assert limiter.backend == "redis"


async def test_a_single_connection_client_works_as_any_other(prefix: str) -> None:
    single = Redis.from_url(REDIS_URL, single_connection_client=True)
    limiter = RedisLimiter(single, clock=SystemClock(), prefix=prefix)
    try:
        await limiter.configure(TENANT, Limit(1.0, 3.0))
        assert (await limiter.reserve([TENANT], 5)).granted == 3
        assert limiter.backend == "redis"
    finally:
        await limiter.aclose()
        await single.aclose()


async def test_a_server_without_functions_runs_the_same_lua_as_scripts(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on Redis 6 (no FCALL, no FUNCTION LOAD): the limiter uses EVALSHA, and loads its
    scripts again when the server has lost them."""
    limiter = await make()

    async def no_functions(*args: Any, **kwargs: Any) -> Any:
        raise ResponseError("unknown command 'FCALL', with args beginning with: ")

    monkeypatch.setattr(limiter._calls, "_fcall", no_functions)
    monkeypatch.setattr(limiter._client, "function_load", no_functions)
    await limiter.configure(TENANT, Limit(1.0, 2.0))
    assert not limiter._calls.uses_functions
    assert (await limiter.reserve([TENANT], 3)).granted == 2
    await limiter.refund(Reservation((TENANT,), 2), 1)  # a batch: a pipeline of EVALSHA
    for script in limiter._calls._scripts.values():
        script.sha = "0" * 40  # as after SCRIPT FLUSH, without flushing a shared server
    assert (await limiter.reserve([TENANT], 3)).granted == 1
    assert [level.key for level in await limiter.levels()] == [TENANT]
    assert limiter.backend == "redis"


async def test_lost_data_is_seeded_again_from_what_the_process_knows(
    make: Make, client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(2.0, 5.0))
    assert (await limiter.reserve([TENANT], 1)).granted == 1
    await delete_prefix(client, prefix)  # what a restart without persistence does to our keys
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        reservation = await limiter.reserve([TENANT], 5)
    assert reservation.granted == 0  # restored empty, not full, and not unlimited
    assert "lost the rate limits" in caplog.text
    assert [level.key for level in await limiter.levels()] == [TENANT]


async def test_a_redis_holding_the_previous_layout_is_seeded_again_empty(
    make: Make, client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Workers upgraded onto a Redis with three keys per bucket (limit, state, block) and the
    unversioned marker: those keys are left alone, and buckets start empty, never full."""
    await client.set(f"{prefix}:seeded", "1")
    await client.sadd(f"{prefix}:buckets", "tenant:acme:")
    old_limit = f"{prefix}:{{t:acme}}:tenant:limit"
    await client.hset(old_limit, items=["rate", "1", "burst", "5"])
    before = await keys_of(client, prefix)
    limiter = await make()
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        await limiter.configure(TENANT, Limit(1.0, 5.0))  # as a worker does when it starts
        await limiter.configure(PROVIDER, Limit(1.0, 5.0))
        reservation = await limiter.reserve(SEND, 5)
    assert reservation.granted == 0
    assert reservation.wait_s == pytest.approx(1.0, abs=0.1)
    assert "lost the rate limits" not in caplog.text  # a first start, not a loss
    assert await client.get(f"{prefix}:seeded:v2") is not None
    assert before <= await keys_of(client, prefix)  # the old keys are not touched
    assert [level.key for level in await limiter.levels()] == sorted([TENANT, PROVIDER])
    await limiter.configure(PAIR, Limit(1.0, 5.0))  # seeded now: a new bucket starts full
    assert (await limiter.reserve([PAIR], 5)).granted == 5


async def test_a_fresh_redis_starts_full_without_warning(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await make()
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        await limiter.configure(TENANT, Limit(1.0, 5.0))
        assert (await limiter.reserve(SEND, 5)).granted == 5
    assert caplog.text == ""


async def test_falls_back_to_a_share_of_each_limit_when_redis_is_unreachable(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    workers = 4
    limiter = await make(UNREACHABLE, fallback_workers=lambda: workers)
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
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

    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        unreachable(monkeypatch, limiter)
        assert (await limiter.reserve([TENANT], 5)).granted == 0  # local, and empty
        assert limiter.backend == "local-fallback"
        await limiter.configure(PROVIDER, Limit(1.0, 3.0))  # remembered, pushed on return
        await asyncio.sleep(0.35)
        await limiter.reserve([TENANT], 1)  # a probe that fails: still local
        assert limiter.degraded
        monkeypatch.undo()
        assert (await limiter.reserve([TENANT], 1)).granted == 0  # no probe due yet
        await asyncio.sleep(0.35)
        back = await limiter.reserve([TENANT], 5)  # Redis's bucket again, drained on return
    assert limiter.backend == "redis"
    assert back.granted == 0
    assert back.wait_s == pytest.approx(1.0, abs=0.1)
    levels = {level.key: level for level in await observer.levels()}
    assert sorted(levels) == sorted([TENANT, PROVIDER])
    assert levels[TENANT].tokens < 0.5  # the one bucket every process sees
    assert "is unavailable" in caplog.text
    assert "answers again" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("made_from", ["url", "client"])
async def test_a_hung_redis_falls_back_within_the_call_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, made_from: str
) -> None:
    """A paused Redis (SIGSTOP: connections open, nothing answers) is left after
    ``call_timeout_s``, not the socket timeout plus a retry; it is probed, bounded just the
    same, and used again once it answers: with the client the limiter makes (its socket
    timeouts are the bound) and with one given to it that has redis-py's default 5 s (the
    limiter's own timer is). A private server: the shared one is never paused."""
    if redis_server_binary() is None:
        missing("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis")
    server.start()
    pid = server.pid
    assert pid is not None
    paused = False
    given = Redis.from_url(server.url) if made_from == "client" else None
    limiter = RedisLimiter(given or server.url, clock=SystemClock(), probe_s=0.3)  # 0.5 s calls
    try:
        await limiter.configure(TENANT, Limit(1.0, 10.0))
        assert (await limiter.reserve([TENANT], 1)).granted == 1
        assert limiter.backend == "redis"

        os.kill(pid, signal.SIGSTOP)
        paused = True
        with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
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
        if given is not None:
            await given.aclose()
        server.stop()


@pytest.mark.slow
async def test_a_loop_held_up_past_the_deadline_is_not_taken_for_an_outage(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's own loop blocked (a long synchronous step, on purpose) while Redis answers
    at once: the timer fires late, the answer is read, the shared limits stay in use, and the
    log says it was the loop."""
    limiter = await make(call_timeout_s=0.2)
    await limiter.configure(TENANT, Limit(1.0, 10.0))
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING, logger="engine.limits"):
        for _ in range(3):
            loop.call_soon(time.sleep, 0.5)  # runs once the call has been sent
            assert (await limiter.reserve([TENANT], 1)).granted == 1
            assert limiter.backend == "redis"
    assert "is unavailable" not in caplog.text
    assert "event loop was" in caplog.text and "not Redis" in caplog.text


async def test_bounded_gives_up_on_silence_with_the_loop_on_time_and_after_a_late_one() -> None:
    """No answer at all: the call gives up after its timeout when the loop is on time, and a
    grace after the late deadline when it is not; the error says the loop was on time."""
    loop = asyncio.get_running_loop()
    never = asyncio.Event()
    start = loop.time()
    with pytest.raises(TimeoutError, match="while this worker's loop was on time"):
        await bounded(never.wait(), 0.1)
    assert 0.1 <= loop.time() - start < 0.2
    start = loop.time()
    loop.call_soon(time.sleep, 0.3)
    with pytest.raises(TimeoutError):
        await bounded(never.wait(), 0.1)
    assert 0.3 <= loop.time() - start < 0.3 + 0.2


def test_call_timeout_must_be_positive() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="call_timeout_s"):
            RedisLimiter(UNREACHABLE, clock=SystemClock(), call_timeout_s=bad)


async def test_a_redis_error_falls_back_instead_of_escaping(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    await client.set(names_of(prefix, TENANT), "not a hash")
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


# -- a Redis outage: each worker's fallback starts on its share of every limit, empty ------------
#
# The fallback runs on a FakeClock, stepped by hand; Redis keeps its own time, which matters
# only before the failure and after the return. What is asserted is one worker's share of the
# envelope, over the grants from the failure on (``within_share``).

LIMIT = Limit(100.0, 10.0)  # the report's tenant: 100/s, burst 10, two workers


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server, for the tests that kill or pause it."""
    if redis_server_binary() is None:
        missing("redis-server is not on PATH")
    with RedisServer(tmp_path / "redis") as private:
        yield private


@pytest.fixture
async def on_server(server: RedisServer) -> AsyncIterator[Callable[..., RedisLimiter]]:
    """RedisLimiters on the private server (one per 'process'), closed at the end."""
    made: list[RedisLimiter] = []

    def build(clock: FakeClock, **kwargs: Any) -> RedisLimiter:
        made.append(RedisLimiter(server.url, clock=clock, **kwargs))
        return made[-1]

    yield build
    for limiter in made:
        await limiter.aclose()


def kill(server: RedisServer) -> None:
    """SIGKILL, as in the report: no goodbye to the clients, and its data gone."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    server.stop()  # reaps it


Grants = list[tuple[float, int]]


def within_share(grants: Grants, limit: Limit, workers: int, failed_at: float) -> None:
    """Assert that one worker's ``grants`` (time, tokens) from ``failed_at`` on hold to its share:
    over any window of W seconds at most ``burst/workers + rate/workers * W + 1``, and, as its
    fallback starts empty, at most ``rate/workers * (t - failed_at) + 1`` by any time t."""
    rate, burst = limit.rate_per_s / workers, limit.burst / workers
    worst = worst_span(grants, rate, burst, edges=1.0)
    assert worst.holds, (
        f"{worst.count:g} granted in the {worst.window_s:.3f} s from"
        f" {worst.start - failed_at:.3f} s after the failure; a share of 1/{workers} allows"
        f" {worst.allowed:g}"
    )
    taken = 0
    for t, n in sorted(grants):
        taken += n
        assert taken <= rate * (t - failed_at) + 1 + 1e-9, (
            f"{taken} granted by {t - failed_at:.3f} s after the failure: not empty at first"
        )


async def take(
    limiter: RedisLimiter,
    clock: FakeClock,
    grants: Grants,
    n: int,
    keys: Sequence[BucketKey] = (TENANT,),
) -> Reservation:
    """One reservation of ``n``, noted in ``grants`` at the clock's time; returns it."""
    reservation = await limiter.reserve(keys, n)
    grants.append((clock.monotonic(), reservation.granted))
    return reservation


async def spend(
    limiter: RedisLimiter, clock: FakeClock, for_s: float, step_s: float = 0.01
) -> Grants:
    """Reserve as a busy dispatcher does, every ``step_s`` for ``for_s``; the grants."""
    grants: Grants = []
    for _ in range(round(for_s / step_s)):
        await take(limiter, clock, grants, 5)
        clock.advance(step_s)
    return grants


async def test_the_fallback_shares_by_the_workers_redis_saw_when_the_count_is_stale(
    server: RedisServer, on_server: Callable[..., RedisLimiter]
) -> None:
    """The report's runs: a worker that started first had not yet seen the other's heartbeat
    (its live count said 1 for up to a heartbeat) and fell back to the whole limit, so the two
    sent about 150/s. Both had just reserved through Redis, which saw two of them."""
    clock = FakeClock()
    first = on_server(clock, fallback_workers=lambda: 1)  # the heartbeat count, still stale
    second = on_server(clock, fallback_workers=lambda: 2)
    for limiter in (first, second):
        await limiter.configure(TENANT, LIMIT)
    for limiter in (second, first):
        assert (await limiter.reserve([TENANT], 1)).granted == 1
    kill(server)
    failed_at = clock.monotonic()
    grants = await spend(first, clock, 1.0)
    assert first.degraded
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)
    [level] = await first.levels()
    assert (level.rate_per_s, level.burst) == (50.0, 5.0)


@pytest.mark.parametrize("how", ["killed", "hung"])
async def test_tokens_redis_granted_are_not_refunded_into_the_fallback(
    server: RedisServer, on_server: Callable[..., RedisLimiter], how: str
) -> None:
    """The dispatcher's retake: reserve (Redis grants the burst), claim, then refund that and
    reserve again. Redis goes away during the claim: the refund finds it gone, and those
    tokens, Redis's, must not fill the new fallback."""
    clock = FakeClock()
    limiter = on_server(clock, fallback_workers=lambda: 2, call_timeout_s=0.2)
    await limiter.configure(TENANT, LIMIT)
    first = await limiter.reserve([TENANT], 10)
    assert first.granted == 10
    pid = server.pid
    assert pid is not None
    if how == "killed":
        kill(server)
    else:  # hung: commands time out, and run once it wakes up
        os.kill(pid, signal.SIGSTOP)
    try:
        failed_at = clock.monotonic()
        await limiter.refund(first, first.granted)
        assert limiter.degraded
        grants: Grants = []
        await take(limiter, clock, grants, 10)
        clock.advance(0.1)
        await take(limiter, clock, grants, 10)
    finally:
        if how == "hung":
            os.kill(pid, signal.SIGCONT)
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


async def test_a_retake_is_one_round_trip(make: Make) -> None:
    limiter = await make()
    await limiter.configure(TENANT, LIMIT)
    first = await limiter.reserve(SEND, 4)
    scripts: list[tuple[str, int]] = []
    run, many = limiter._script, limiter._calls.many

    async def counted(name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        scripts.append((name, 1))
        return await run(name, keys, args)

    async def counted_many(name: str, calls: Sequence[Any]) -> list[Any]:
        scripts.append((name, len(calls)))
        return await many(name, calls)

    limiter._script = counted  # type: ignore[method-assign]
    limiter._calls.many = counted_many  # type: ignore[method-assign]
    again = await limiter.retake(first, 2)
    assert (again.granted, scripts) == (2, [("batch", 1)])


async def test_a_retake_after_redis_went_away_gives_nothing_to_the_fallback(
    server: RedisServer, on_server: Callable[..., RedisLimiter]
) -> None:
    """As the refund above, through the one-step retake: the claim's tokens were Redis's."""
    clock = FakeClock()
    limiter = on_server(clock, fallback_workers=lambda: 2, call_timeout_s=0.2)
    await limiter.configure(TENANT, LIMIT)
    first = await limiter.reserve([TENANT], 10)
    assert first.granted == 10
    kill(server)
    failed_at = clock.monotonic()
    again = await limiter.retake(first, 10)
    assert limiter.degraded
    grants: Grants = [(clock.monotonic(), again.granted)]
    clock.advance(0.1)
    await take(limiter, clock, grants, 10)
    assert again.granted == 0
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


async def test_a_late_refund_of_redis_tokens_does_not_add_to_a_refilled_fallback(
    server: RedisServer, on_server: Callable[..., RedisLimiter]
) -> None:
    clock = FakeClock()
    limiter = on_server(clock, fallback_workers=lambda: 2)
    await limiter.configure(TENANT, LIMIT)
    first = await limiter.reserve([TENANT], 10)
    kill(server)
    failed_at = clock.monotonic()
    grants: Grants = []
    await take(limiter, clock, grants, 10)  # finds Redis gone: the fallback, empty
    clock.advance(0.1)
    await take(limiter, clock, grants, 10)  # its share refilled: 5
    await limiter.refund(first, first.granted)
    await take(limiter, clock, grants, 10)
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


async def test_a_reservation_redis_answers_after_the_fallback_took_over_is_redis_s(
    server: RedisServer,
    on_server: Callable[..., RedisLimiter],
    monkeypatch: pytest.MonkeyPatch,  # after on_server: undone before the limiter is closed
) -> None:
    """Two sends at once: Redis grants one (its answer still on the way) and dies, and the
    other finds it gone and starts the fallback. The first reservation came from Redis all the
    same: refunded, it must not fill the fallback either."""
    clock = FakeClock()
    limiter = on_server(clock, fallback_workers=lambda: 2)
    await limiter.configure(TENANT, LIMIT)
    await limiter.reserve([PAIR], 1)  # the first on a fresh Redis seeds it, in a second call
    calls = limiter._calls
    answered, deliver = asyncio.Event(), asyncio.Event()

    async def slow_answer(name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        result = await calls(name, keys, args)
        if name == "reserve" and not deliver.is_set():
            answered.set()
            await deliver.wait()
        return result

    monkeypatch.setattr(limiter, "_calls", slow_answer)
    pending = asyncio.create_task(limiter.reserve([TENANT], 10))
    await answered.wait()
    kill(server)
    failed_at = clock.monotonic()
    grants: Grants = []
    await take(limiter, clock, grants, 10)
    assert limiter.degraded
    deliver.set()
    first = await pending
    assert first.granted == 10
    await limiter.refund(first, first.granted)
    await take(limiter, clock, grants, 10)
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


@pytest.mark.parametrize("before", [None, Limit(100.0, 10.0)], ids=["new", "removed"])
async def test_a_limit_configured_during_the_outage_starts_empty_in_the_fallback(
    server: RedisServer, on_server: Callable[..., RedisLimiter], before: Limit | None
) -> None:
    """The directory configures a limit another process set (and may just have spent in Redis)
    while this one falls back: a new bucket there starts empty, like those it had, and so does
    one removed and added again."""
    clock = FakeClock()
    limiter = on_server(clock, fallback_workers=lambda: 2)
    await limiter.configure(TENANT, LIMIT)
    if before is not None:
        await limiter.configure(PROVIDER, before)
    kill(server)
    failed_at = clock.monotonic()
    await limiter.reserve([TENANT], 1)
    assert limiter.degraded
    if before is not None:
        await limiter.configure(PROVIDER, None)
    await limiter.configure(PROVIDER, LIMIT)
    grants: Grants = []
    await take(limiter, clock, grants, 5, keys=(PROVIDER,))
    clock.advance(0.05)
    await take(limiter, clock, grants, 5, keys=(PROVIDER,))
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


async def test_a_new_worker_count_during_the_outage_refills_nothing(
    server: RedisServer, on_server: Callable[..., RedisLimiter]
) -> None:
    clock = FakeClock()
    workers = 2
    limiter = on_server(clock, fallback_workers=lambda: workers)
    await limiter.configure(TENANT, LIMIT)
    kill(server)
    failed_at = clock.monotonic()
    grants = await spend(limiter, clock, 0.5)
    workers = 3  # the heartbeat count goes up: a smaller share, kept at its level
    grants += await spend(limiter, clock, 0.2)
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)
    [level] = await limiter.levels()
    assert level.rate_per_s == pytest.approx(100.0 / 3)
    assert level.tokens < 1.0


async def test_coming_back_does_not_grant_again_a_burst_spent_locally(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alone, with Redis cut off but keeping its data: its bucket refilled meanwhile, while the
    fallback spent the same limit. Coming back must not add Redis's burst to the one just
    spent; nor may a reservation of the fallback's be refunded into Redis."""
    clock = FakeClock()
    limit = Limit(10.0, 10.0)
    limiter = await make(clock=clock, probe_s=2.0)
    await limiter.configure(TENANT, limit)
    unreachable(monkeypatch, limiter)
    failed_at = clock.monotonic()
    grants: Grants = []
    await take(limiter, clock, grants, 10)
    clock.advance(1.9)
    spent_locally = await take(limiter, clock, grants, 10)  # the fallback's burst
    assert spent_locally.granted == 10
    monkeypatch.undo()
    clock.advance(0.1)
    await take(limiter, clock, grants, 10)  # the probe: Redis again
    assert limiter.backend == "redis"
    await limiter.refund(spent_locally, spent_locally.granted)
    await take(limiter, clock, grants, 10)
    within_share(grants, limit, workers=1, failed_at=failed_at)


async def test_each_new_fallback_starts_empty_and_takes_no_refund_from_before(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis flapping: away, back, away again. The second fallback starts empty too, and
    neither the first fallback's reservations nor Redis's fill it."""
    clock = FakeClock()
    limiter = await make(clock=clock, probe_s=0.5, fallback_workers=lambda: 2)
    await limiter.configure(TENANT, LIMIT)
    unreachable(monkeypatch, limiter)
    await limiter.reserve([TENANT], 1)
    clock.advance(0.2)
    local = await limiter.reserve([TENANT], 10)
    assert local.granted == 5
    monkeypatch.undo()
    clock.advance(0.3)
    from_redis = await limiter.reserve([TENANT], 1)
    assert limiter.backend == "redis"
    unreachable(monkeypatch, limiter)
    failed_at = clock.monotonic()
    grants: Grants = []
    await take(limiter, clock, grants, 10)
    assert limiter.degraded
    await limiter.refund(local, local.granted)
    await limiter.refund(from_redis, from_redis.granted)
    await take(limiter, clock, grants, 10)
    clock.advance(0.05)
    await take(limiter, clock, grants, 10)
    within_share(grants, LIMIT, workers=2, failed_at=failed_at)


async def test_the_first_back_holds_the_buckets_when_redis_saw_others_though_its_count_is_stale(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    stale = await make(clock=clock, probe_s=0.5, fallback_workers=lambda: 1)
    other = await make(clock=clock, fallback_workers=lambda: 2)
    for limiter in (stale, other):
        await limiter.configure(TENANT, LIMIT)
    for limiter in (other, stale):
        await limiter.reserve([TENANT], 1)
    unreachable(monkeypatch, stale)
    await stale.reserve([TENANT], 1)
    assert stale.degraded
    monkeypatch.undo()
    clock.advance(0.5)
    await stale.reserve([TENANT], 1)
    assert stale.backend == "redis"
    [level] = await other.levels()
    assert level.blocked_for_s > 0.3  # held for the other's local share, still being spent
    assert (await other.reserve([TENANT], 1)).granted == 0
