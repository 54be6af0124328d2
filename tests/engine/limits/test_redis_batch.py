"""The Redis limiter's batches (``engine/limits/redis_batch.py``): one round trip per batch, chunks
that follow each other, and falling back as the single calls do.

What a batch answers is checked against the single calls on every limiter in
``test_limiter_contract``; here is what only Redis has. Round trips are counted as writes on
the limiter's connections (its Lua lanes, and redis-py's commands), and on a private
redis-server also as the server's own count of commands (``INFO commandstats``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from engine.core.clock import FakeClock, SystemClock
from engine.core.domain import BucketKey, Limit
from engine.limits.envelope import worst_span
from engine.limits.limiter import Reservation
from engine.limits.redis_batch import CHUNK
from engine.limits.redis_limiter import RedisLimiter
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

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

TENANTS = 1_000
# What the limiter's scripts run inside them (counted by INFO commandstats too).
IN_SCRIPTS = {"time", "exists", "hmget", "hset", "hdel", "zadd", "zremrangebyscore", "pexpire"}
IN_SCRIPTS |= {"zcard", "persist"}
SLOW = Limit(0.01, 5.0)  # no whole token refills while a test runs


def sends(count: int, provider: str = "mailgun") -> list[tuple[BucketKey, ...]]:
    return [BucketKey.for_send(f"t{i:04d}", provider) for i in range(count)]


class Trips:
    """Counts what a limiter writes to Redis: packed Lua calls on its lanes (one write per
    round trip, however many calls it holds) and redis-py commands (one each)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, limiter: RedisLimiter) -> None:
        self.writes = 0
        self.fcalls = 0  # FCALLs in those writes
        self.commands: list[str] = []
        lanes(monkeypatch, limiter, self._hook)
        real = cast(Callable[..., Awaitable[Any]], limiter._client.execute_command)

        async def execute(*args: Any, **kwargs: Any) -> Any:
            self.commands.append(str(args[0]))
            return await real(*args, **kwargs)

        monkeypatch.setattr(limiter._client, "execute_command", execute)

    def _hook(self, conn: Any) -> None:
        real_send = conn.send_packed_command

        async def send(command: Any, **kwargs: Any) -> None:
            if is_fcall(command):
                self.writes += 1
                self.fcalls += command.count(b"\r\nFCALL\r\n")
            await real_send(command, **kwargs)

        conn.send_packed_command = send

    def reset(self) -> tuple[int, int, list[str]]:
        seen = (self.writes, self.fcalls, self.commands)
        self.writes, self.fcalls, self.commands = 0, 0, []
        return seen


@pytest.fixture
async def client() -> AsyncIterator[Redis]:
    """A client to the shared test server (skips without one), to look at keys directly."""
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
        made.append(RedisLimiter(url, **kwargs))
        return made[-1]

    yield build
    for limiter in made:
        await limiter.aclose()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server: its command counts are this test's alone."""
    if redis_server_binary() is None:
        missing("redis-server is not on PATH")
    with RedisServer(tmp_path / "redis") as private:
        yield private


@pytest.fixture
async def observer(server: RedisServer) -> AsyncIterator[Redis]:
    c = Redis.from_url(server.url)
    yield c
    await c.aclose()


async def calls_counted(observer: Redis) -> dict[str, int]:
    """The server's count of each command since the last ``CONFIG RESETSTAT``, without the
    observer's own; those a script runs count too."""
    stats = await observer.info("commandstats")
    counts = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    return {name: n for name, n in counts.items() if name not in {"config|resetstat", "info"}}


async def test_a_batch_over_1000_tenants_is_one_round_trip(
    server: RedisServer, observer: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = RedisLimiter(server.url, clock=SystemClock())
    try:
        keys = sends(TENANTS)
        await limiter.configure(keys[0][1], Limit(1e6, 1e6))  # the provider they share
        for send in keys:
            await limiter.configure(send[0], SLOW)
        await limiter.reserve([TENANT], 1)  # seeds the fresh server
        trips = Trips(monkeypatch, limiter)
        await limiter.reserve([TENANT], 1)  # connects the lanes Trips watches
        trips.reset()
        await observer.config_resetstat()

        first = await limiter.reserve_many([(send, 2) for send in keys])
        assert [r.granted for r in first] == [2] * TENANTS
        assert trips.reset() == (1, 2, [])  # one write of two chunks of 500; nothing else
        counted = await calls_counted(observer)
        assert {name for name in counted if name not in IN_SCRIPTS} == {"fcall"}
        assert counted["fcall"] == 2  # from clients, only those two
        # Each chunk reads a bucket once however many of its sends share it, and writes it
        # once: the tenants and their pairs, and the provider once per chunk.
        assert (counted["hmget"], counted["hset"], counted["time"]) == (2002, 1002, 2)

        again = await limiter.retake_many([(r, 4) for r in first])
        assert [r.granted for r in again] == [4] * TENANTS
        await limiter.refund_many([(r, 1) for r in again])
        some = await limiter.levels([send[0] for send in keys])
        assert [level.tokens for level in some] == [pytest.approx(2.0, abs=0.01)] * TENANTS
        assert trips.reset() == (3, 5, [])  # one each (levels: one script, no SMEMBERS)
        assert limiter.backend == "redis"
    finally:
        await limiter.aclose()


async def test_chunks_run_in_order_each_seeing_the_takes_before_it(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One provider bucket of 700 shared by 1,200 sends over three chunks: the first 700
    asks have a token, the rest none, as one by one."""
    limiter = await make()
    keys = sends(2 * CHUNK + 200)
    await limiter.configure(keys[0][1], Limit(0.01, 700.0))
    await limiter.reserve([TENANT], 1)  # seeds
    trips = Trips(monkeypatch, limiter)
    got = await limiter.reserve_many([(send, 1) for send in keys])
    assert [r.granted for r in got] == [1] * 700 + [0] * 500
    assert all(r.wait_s == pytest.approx(100.0, abs=0.5) for r in got[700:])
    assert trips.reset()[:2] == (1, 3)
    [level] = await limiter.levels([keys[0][1]])
    assert level.tokens == pytest.approx(0.0, abs=0.01)


async def test_retakes_over_chunks_carry_each_takes_time_and_rooms(make: Make) -> None:
    """1,200 retakes over three chunks, each giving back the reservation it names (its
    time and its buckets' rooms sent back with it): every grant kept, none given twice, the
    bucket left where the takes put it."""
    limiter = await make()
    keys = sends(2 * CHUNK + 200)
    await limiter.configure(keys[0][1], Limit(0.01, 1500.0))
    first = await limiter.reserve_many([(send, 1) for send in keys])
    assert {r.granted for r in first} == {1}
    assert all(len(r.rooms) == len(r.keys) and r.at > 0 for r in first)
    again = await limiter.retake_many([(r, 1) for r in first])
    assert [r.granted for r in again] == [1] * len(keys)
    [level] = await limiter.levels([keys[0][1]])
    assert level.tokens == pytest.approx(300.0, abs=0.05)


@pytest.mark.parametrize("lent", [True, False], ids=["lent", "not lent"])
async def test_claims_of_several_processes_overlapping_give_back_no_token_all_would_lose(
    make: Make, lent: bool
) -> None:
    """Three workers' claims (A, B, C) on one provider's bucket (10/s, burst 10) overlap in
    time, and a fourth (U) sends. Each claim's refund, bounded by its own room alone, is right
    for a world where only it was never taken; but C reserved while B was out, so C's room
    counts B's tokens, which B gave back too: together they give back 2 tokens the bucket would
    have lost to its burst had none of the claims been taken, and U's sends (16 in 0.4 s, where
    14 are allowed) break the envelope. Lent (as the dispatcher reserves), the bucket keeps what
    the unsettled claims would have left it, and no refund gives back more."""
    a, b, c, u = [await make() for _ in range(4)]
    await a.configure(PROVIDER, Limit(10.0, 10.0))
    keys = [PROVIDER]

    async def claim(limiter: RedisLimiter, n: int) -> Reservation:
        [got] = await limiter.reserve_many([(keys, n)], lent=lent)
        assert got.granted == n
        return got

    sent: list[tuple[float, float]] = []

    async def send(n: int) -> None:
        got = await u.reserve(keys, n)
        sent.append((got.at, got.granted))

    first = await claim(a, 3)  # 10 -> 7
    second = await claim(b, 6)  # -> 1
    await a.retake_many([(first, 0)])  # A leased nothing: -> 4
    await asyncio.sleep(0.15)  # -> 5.5
    third = await claim(c, 5)  # -> 0.5, its room counting B's 6 as taken
    await b.retake_many([(second, 0)])  # -> 6.5
    await asyncio.sleep(0.15)  # -> 8
    await send(6)  # -> 2
    await asyncio.sleep(0.15)  # -> 3.5
    await c.retake_many([(third, 0)])
    await asyncio.sleep(0.25)
    await send(5)
    await send(5)
    worst = worst_span(sent, 10.0, 10.0, edges=0.01)
    if lent:
        assert worst.holds, worst
    else:  # what the dispatcher's claims did before they were lent
        assert not worst.holds and worst.count - worst.allowed > 1, worst


async def test_batches_of_nothing_do_no_io() -> None:
    """Nothing asked, nothing to give back: answered without a word to Redis, so a limiter on
    an unreachable one never even finds out."""
    limiter = RedisLimiter(UNREACHABLE, clock=SystemClock())
    try:
        assert await limiter.reserve_many([]) == []
        assert await limiter.retake_many([]) == []
        await limiter.refund_many([])
        assert await limiter.levels([]) == []
        assert await limiter.reserve_many([(SEND, 0), (SEND, -1)]) == [Reservation(SEND, 0)] * 2
        none = Reservation(SEND, 0)
        assert await limiter.retake_many([(none, 0)]) == [none]
        await limiter.refund_many([(none, 3), (Reservation(SEND, 2), 0)])
        assert limiter.backend == "redis"  # never tried
    finally:
        await limiter.aclose()


async def test_an_unreachable_redis_falls_back_as_the_single_calls_do(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """Two limiters on an unreachable Redis, on one virtual clock: one makes the single
    calls, the other the batches; they fall back alike and answer alike."""
    clock = FakeClock()
    one = await make(UNREACHABLE, clock=clock, fallback_workers=lambda: 2, probe_s=5.0)
    many = await make(UNREACHABLE, clock=clock, fallback_workers=lambda: 2, probe_s=5.0)
    asks = [(SEND, 3), (BucketKey.for_send("globex", "mailgun"), 4), (SEND, 1), ([PAIR], 0)]
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        for limiter in (one, many):
            await limiter.configure(TENANT, Limit(10.0, 6.0))
            await limiter.configure(PROVIDER, Limit(20.0, 8.0))
        clock.advance(0.5)  # the shares (5/s burst 3, 10/s burst 4) refill from empty
        singly = [await one.reserve(keys, n) for keys, n in asks]
        batched = await many.reserve_many(asks)
        assert batched == singly
        assert [r.granted for r in batched] == [2, 2, 0, 0]
        clock.advance(0.2)
        singly = [await one.retake(r, 2) for r in singly[:2]]
        batched = await many.retake_many([(r, 2) for r in batched[:2]])
        assert batched == singly
        for r in singly:
            await one.refund(r, 1)
        await many.refund_many([(r, 1) for r in batched])
        assert await many.levels() == await one.levels()
        assert await many.levels([TENANT]) == await one.levels([TENANT])
    assert (one.backend, many.backend) == ("local-fallback", "local-fallback")
    assert caplog.text.count("is unavailable") == 2  # once for each, not once per call


async def slow_replies(
    monkeypatch: pytest.MonkeyPatch, limiter: RedisLimiter, delays_s: list[float]
) -> None:
    """From the next call on, each reply to the limiter's Lua calls arrives after the next of
    ``delays_s`` (then at once); the lane is connected first (a reservation of nothing)."""
    delays: list[float] = []

    def slow(conn: Any) -> None:
        real_read = conn.read_response

        async def read(*args: Any, **kwargs: Any) -> Any:
            reply = await real_read(*args, **kwargs)
            if delays:
                await asyncio.sleep(delays.pop(0))
            return reply

        conn.read_response = read

    lanes(monkeypatch, limiter, slow)
    await limiter.reserve([BucketKey.for_tenant("warm-up")], 1)
    delays.extend(delays_s)


async def test_a_long_batch_has_the_call_timeout_for_each_chunk_not_for_all(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = await make(call_timeout_s=0.2)
    keys = sends(2 * CHUNK + 1)
    await limiter.configure(keys[0][1], SLOW)
    await limiter.reserve([TENANT], 1)  # seeds
    await slow_replies(monkeypatch, limiter, [0.12, 0.12, 0.12])  # 0.36 s in all
    got = await limiter.reserve_many([(send, 1) for send in keys])
    assert limiter.backend == "redis"
    assert [r.granted for r in got] == [1] * 5 + [0] * (2 * CHUNK - 4)


async def test_a_batch_that_hangs_falls_back_after_the_chunks_redis_answered(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis answers the first chunk, then nothing within the call timeout: the first
    chunk's grants stand (Redis's), the rest is the fallback's, as if Redis had gone away
    between them."""
    limiter = await make(call_timeout_s=0.1)
    keys = sends(2 * CHUNK)
    for send in keys:
        await limiter.configure(send[0], SLOW)
    await limiter.reserve([TENANT], 1)  # seeds
    await slow_replies(monkeypatch, limiter, [0.0, 0.5])  # chunk 1 at once, chunk 2 late
    got = await limiter.reserve_many([(send, 1) for send in keys])
    assert limiter.backend == "local-fallback"
    assert [(r.granted, getattr(r, "era", None)) for r in got] == [(1, 0)] * CHUNK + [
        (0, 1)
    ] * CHUNK


async def test_a_refund_many_that_finds_redis_gone_does_as_refund_one_by_one(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund that finds Redis gone leaves its tokens out; the fallback it starts takes
    the next ones (reservations made elsewhere count as the backend in use's)."""
    clock = FakeClock()
    one, many = await make(clock=clock), await make(clock=clock)
    for limiter in (one, many):
        await limiter.configure(TENANT, Limit(10.0, 10.0))
        await limiter.reserve([TENANT], 1)  # seeds
        unreachable(monkeypatch, limiter)
    made_elsewhere = [Reservation((TENANT,), 3), Reservation((TENANT,), 2)]
    for reservation in made_elsewhere:
        await one.refund(reservation, reservation.granted)
    await many.refund_many([(r, r.granted) for r in made_elsewhere])
    assert (one.backend, many.backend) == ("local-fallback", "local-fallback")
    assert [lv.tokens for lv in await one.levels()] == [2.0]  # the 3 lost, the 2 kept
    assert [lv.tokens for lv in await many.levels()] == [2.0]


async def test_a_chunk_that_fails_falls_back_from_its_start_and_keeps_the_chunks_before(
    make: Make, client: Redis, prefix: str
) -> None:
    """A WRONGTYPE on one tenant's bucket in the second chunk: the first chunk stands (granted
    by Redis), the second is the fallback's (empty at first), as if Redis had gone away at
    its start; and it took nothing in Redis, even before the bad bucket."""
    limiter = await make(clock=SystemClock())
    observer = await make()
    keys = sends(CHUNK + 200)
    for send in keys:
        await limiter.configure(send[0], SLOW)
    await limiter.reserve([TENANT], 1)  # seeds
    [bad] = limiter._hashes([keys[CHUNK + 100][0]])
    await client.delete(bad)
    await client.set(bad, "not a hash")
    got = await limiter.reserve_many([(send, 1) for send in keys])
    assert limiter.backend == "local-fallback"
    assert [r.granted for r in got] == [1] * CHUNK + [0] * 200
    assert {getattr(r, "era", None) for r in got[:CHUNK]} == {0}  # Redis's
    assert {getattr(r, "era", None) for r in got[CHUNK:]} == {1}  # the fallback's
    levels = await observer.levels([keys[0][0], keys[CHUNK][0], keys[CHUNK + 99][0]])
    assert [level.tokens for level in levels] == [
        pytest.approx(4.0, abs=0.01),
        pytest.approx(5.0, abs=0.01),  # untouched: the chunk wrote nothing
        pytest.approx(5.0, abs=0.01),
    ]


async def test_a_retake_many_after_redis_went_away_gives_redis_tokens_to_no_one(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    limiter = await make(clock=clock, fallback_workers=lambda: 1)
    await limiter.configure(TENANT, Limit(100.0, 10.0))
    first = await limiter.reserve_many([([TENANT], 4), ([TENANT], 6)])
    assert [r.granted for r in first] == [4, 6]
    unreachable(monkeypatch, limiter)
    again = await limiter.retake_many([(r, 5) for r in first])
    assert limiter.degraded
    assert [r.granted for r in again] == [0, 0]  # the fallback starts empty; nothing given
    await limiter.refund_many([(r, r.granted) for r in first])  # Redis's: not the fallback's
    [level] = await limiter.levels()
    assert level.tokens == pytest.approx(0.0)
    clock.advance(0.05)
    local = await limiter.reserve_many([([TENANT], 9)])
    assert local[0].granted == 5
    await limiter.refund_many([(local[0], 5)])  # the fallback's own: back to it
    [level] = await limiter.levels()
    assert level.tokens == pytest.approx(5.0)


async def test_a_batch_returns_to_redis_when_a_probe_finds_it_back(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    limiter = await make(clock=clock, probe_s=1.0)
    await limiter.configure(TENANT, Limit(0.01, 10.0))
    await limiter.reserve([TENANT], 1)  # seeds the fresh prefix
    unreachable(monkeypatch, limiter)
    assert (await limiter.reserve_many([([TENANT], 1)]))[0].granted == 0
    monkeypatch.undo()
    clock.advance(1.0)
    trips = Trips(monkeypatch, limiter)
    got = await limiter.reserve_many([([PAIR], 1), ([PROVIDER], 2)])
    assert limiter.backend == "redis"
    era = limiter._fallback.era
    assert [(r.granted, getattr(r, "era", None)) for r in got] == [(1, era), (2, era)]
    writes, _, commands = trips.reset()
    assert writes == 2  # the probe's draining block, then the batch
    assert "PING" in commands


async def test_lost_data_is_seeded_again_and_a_retake_there_gives_nothing_back(
    make: Make, client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(0.01, 5.0))
    [first] = await limiter.reserve_many([([TENANT], 2)])
    await client.delete(*[key async for key in client.scan_iter(match=f"{prefix}:*")])
    with caplog.at_level(logging.WARNING, logger="engine.limits.redis_limiter"):
        again = await limiter.retake_many([(first, 2)])
    assert [r.granted for r in again] == [0]  # restored empty, and the 2 not given back
    assert "lost the rate limits" in caplog.text
    await client.delete(*[key async for key in client.scan_iter(match=f"{prefix}:*")])
    got = await limiter.reserve_many([([TENANT], 1), ([PROVIDER], 3)])
    assert [r.granted for r in got] == [0, 3]
    assert limiter.backend == "redis"


async def test_a_batch_writes_this_process_into_the_peers_when_due(
    make: Make, client: Redis, prefix: str
) -> None:
    limiter = await make()
    await limiter.configure(TENANT, Limit(1.0, 5.0))
    await limiter.refund_many([(Reservation((TENANT,), 1), 1)])
    assert await client.zcard(f"{prefix}:peers:v2") == 0  # a refund does not count
    await limiter.reserve_many([([PROVIDER], 1), ([TENANT], 1)])
    assert await client.zcard(f"{prefix}:peers:v2") == 1
    assert limiter._count_peers_at > 0


async def test_a_server_without_functions_runs_batches_as_scripts(
    server: RedisServer, observer: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on Redis 6 (no FCALL): a batch is a pipeline of EVALSHA, which loads the scripts
    again when the server has lost them (SCRIPT FLUSH, on the private server)."""
    limiter = RedisLimiter(server.url, clock=SystemClock())

    async def no_functions(command: bytes, replies: int, **kwargs: Any) -> list[Any]:
        return [ResponseError("unknown command 'FCALL', with args beginning with: ")] * replies

    async def cannot_load(*args: Any, **kwargs: Any) -> Any:
        raise ResponseError("unknown command 'FUNCTION', with args beginning with: ")

    try:
        monkeypatch.setattr(limiter._calls, "_on_lane", no_functions)
        monkeypatch.setattr(limiter._client, "function_load", cannot_load)
        await limiter.configure(TENANT, Limit(0.01, 3.0))
        assert not limiter._calls.uses_functions
        got = await limiter.reserve_many([([TENANT], 2), (SEND, 2)])
        assert [r.granted for r in got] == [2, 1]
        await observer.script_flush()
        await limiter.refund_many([(got[0], 2)])
        assert [r.granted for r in await limiter.retake_many([(got[1], 3)])] == [3]
        [level] = await limiter.levels([TENANT, PROVIDER])
        assert level.tokens == pytest.approx(0.0, abs=0.01)
        assert limiter.backend == "redis"
    finally:
        await limiter.aclose()
