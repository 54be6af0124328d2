"""A stopped engine starts again with the limiter it had: Stop then Start lets no extra burst out.

A new engine's local buckets start full, so reopening one after a stop let a second burst go
out right behind the first. ``Engine.restart`` (and ``start`` after a stop) keeps the limiter,
its buckets' levels and the directory, and runs as a new worker with a fresh dispatcher.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    BucketKey,
    Engine,
    EngineState,
    FakeClock,
    Limit,
    RedisLimiter,
    SecretBox,
    Store,
    SystemClock,
)
from testkit.envelope import check_envelope
from testkit.redis_limiters import REDIS_URL, delete_prefix, new_prefix, redis_client_or_skip
from testkit.scripted import Script
from testkit.virtual_time import VirtualEngines, until

RATE_PER_S, BURST = 10.0, 10.0
WINDOWS_S = (0.1, 0.5, 1.0, 2.0)


async def tenant_tokens(engine: Engine) -> float:
    [level] = [b for b in await engine.limiter.levels() if b.key == BucketKey.for_tenant("acme")]
    return level.tokens


async def enqueue(engine: Engine, start: int, n: int) -> None:
    for i in range(start, start + n):
        await engine.enqueue("acme", "p", f"user{i}@example.com", key=f"k{i}")


async def test_stop_then_restart_keeps_the_buckets_and_the_envelope(
    engines: VirtualEngines, clock: FakeClock, script: Script
) -> None:
    engine = await engines.open()
    await engine.tenant_add("acme", Limit(RATE_PER_S, BURST))
    await engine.provider_add("p", "scripted")
    await enqueue(engine, 0, 10)
    await engine.start()
    await until(clock, lambda: len(script.calls) == 10, what="the first burst")
    first_worker = engine.worker_id
    await engine.stop()

    before = await tenant_tokens(engine)
    assert before < 1.0, "the first burst emptied the bucket"
    await engine.restart()
    assert engine.state is EngineState.RUNNING
    assert engine.worker_id != first_worker, "worker ids are unique per start"
    after = await tenant_tokens(engine)
    assert after == pytest.approx(before, abs=0.05), "the bucket was refilled by the restart"

    await enqueue(engine, 10, 20)
    await until(clock, lambda: len(script.calls) == 30, what="the sends after the restart")
    check_envelope([c.at_s for c in script.calls], RATE_PER_S, BURST, WINDOWS_S)
    assert {c.message.idempotency_key for c in script.calls} == {f"k{i}" for i in range(30)}
    workers = {w.id: w.state for w in await engine.store.workers.read()}
    assert workers.get(first_worker) == "stopped"
    assert workers.get(engine.worker_id) == "running"


async def test_a_restart_after_stop_keeps_the_concurrency(
    engines: VirtualEngines, clock: FakeClock, script: Script
) -> None:
    engine = await engines.open()
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")
    await engine.start()
    engine.concurrency_set(3)
    await engine.stop()
    await engine.restart()  # no "open a new one": the same engine goes on
    assert (engine.state, engine.concurrency) == (EngineState.RUNNING, 3)
    await enqueue(engine, 0, 2)
    await until(clock, lambda: len(script.calls) == 2, what="sends after the start")
    assert engine.totals().delivered == 2


async def test_restarting_a_running_engine_stops_it_first(
    engines: VirtualEngines, clock: FakeClock, script: Script
) -> None:
    engine = await engines.open()
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")
    await engine.start()
    first_worker = engine.worker_id
    await engine.restart()
    assert engine.state is EngineState.RUNNING and engine.worker_id != first_worker
    await enqueue(engine, 0, 1)
    await until(clock, lambda: len(script.calls) == 1, what="a send after the restart")


# -- Redis: the buckets live in Redis, and a restart reuses the same limiter ----------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(
        f"sqlite:///{tmp_path / 'omnipost.db'}", SecretBox([SecretBox.generate_key()])
    ) as store:
        await store.migrate()
        yield store


@pytest.mark.slow
@pytest.mark.redis
async def test_restart_keeps_the_redis_buckets(sqlite_store: Store) -> None:
    client = await redis_client_or_skip()
    prefix = new_prefix()
    limiter = RedisLimiter(REDIS_URL, clock=SystemClock(), prefix=prefix)
    engine = Engine(sqlite_store, limiter, BUILTIN_KINDS, limiter_backend="redis")
    try:
        await engine.open()
        await engine.tenant_add("acme", Limit(0.5, 5))  # refills one token in two seconds
        await engine.provider_add("p", "simulated", None, {"latency_ms": "0"})
        await enqueue(engine, 0, 5)
        await engine.start()
        assert await engine.run_until_empty(timeout_s=10.0)
        await engine.stop()
        before = await tenant_tokens(engine)
        assert before < 1.0

        await engine.restart()
        assert engine.limiter_backend == "redis"
        assert await tenant_tokens(engine) < 1.5, "the restart filled the bucket"
        await enqueue(engine, 5, 1)
        assert await engine.run_until_empty(timeout_s=10.0)
        assert engine.totals().delivered == 6
    finally:
        await engine.close()
        await delete_prefix(client, prefix)
        await client.aclose()
