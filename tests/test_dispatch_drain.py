"""Draining a queue with real engines on a real store: exactly once, at scale, and fairly."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    Limit,
    LocalLimiter,
    NotificationState,
    Outcome,
    SecretBox,
    Store,
    SystemClock,
)
from tests.conftest import EngineFactory
from tests.envelope import check_envelope

Stores = Callable[[], Awaitable[Store]]


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        done = check()
        if done if isinstance(done, bool) else await done:
            return
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
        await asyncio.sleep(0.02)


async def enqueue(engine: Engine, tenant: str, provider: str, n: int, chunk: int = 2000) -> None:
    items = [
        (provider, f"user{i}@{tenant}.example", {"i": i}, f"{tenant}-{i}", 0) for i in range(n)
    ]
    for start in range(0, n, chunk):
        await engine.enqueue_many(tenant, items[start : start + chunk])


async def counts(store: Store) -> dict[tuple[int, NotificationState], int]:
    return {(row.tenant_id, row.state): row.count for row in await store.queue.depth()}


async def all_delivered(store: Store, total: int) -> bool:
    found = await counts(store)
    delivered = sum(n for (_, state), n in found.items() if state is NotificationState.DELIVERED)
    return delivered == total


def read_keys(path: Path) -> Counter[str]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return Counter(f"{line['tenant']}/{line['idempotency_key']}" for line in lines)


@pytest.fixture
async def second_store(store_url: str, box: SecretBox) -> AsyncIterator[Store]:
    """Another Store object on the test's database: another pool, as another process has."""
    async with Store(store_url, box) as s:
        yield s


async def test_twenty_workers_drain_a_hundred_exactly_once(
    store: Store, second_store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=2))
    engines = [
        Engine(s, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
        for s in [store, second_store] * 10
    ]
    try:
        await engines[0].add_tenant("acme")
        await engines[0].add_provider("f", "file", options={"path": str(out)})
        await enqueue(engines[0], "acme", "f", 100)
        for engine in engines:
            await engine.open()
        await asyncio.gather(*(engine.start() for engine in engines))
        await eventually(lambda: all_delivered(store, 100), 30, "100 delivered")
        await asyncio.gather(*(engine.stop() for engine in engines))

        assert len({engine.worker_id for engine in engines}) == 20
        keys = read_keys(out)
        assert keys == Counter({f"acme/acme-{i}": 1 for i in range(100)})
        tenant_id = engines[0].directory.tenant_id("acme")
        assert tenant_id is not None
        assert await counts(store) == {(tenant_id, NotificationState.DELIVERED): 100}
        log = await store.queue.deliveries(tenant_id, limit=1000)
        assert len({entry.notification_id for entry in log}) == len(log) == 100
        assert {entry.outcome for entry in log} == {Outcome.DELIVERED}
        assert len({entry.worker for entry in log}) > 1  # the work was shared
        assert sum(engine.dispatcher.delivered for engine in engines) == 100
        assert sum(engine.telemetry.totals().takeovers for engine in engines) == 0
    finally:
        for engine in engines:
            await engine.close()


async def test_ten_thousand_across_five_tenants_none_lost_none_twice(
    make_engine: EngineFactory, store: Store, tmp_path: Path
) -> None:
    tenants, per_tenant = [f"t{i}" for i in range(5)], 2000
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=64)
    for tenant in tenants:
        await engine.add_tenant(tenant)
    await engine.add_provider("f", "file", options={"path": str(out)})
    for tenant in tenants:
        await enqueue(engine, tenant, "f", per_tenant)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=120)
    await engine.stop()

    expected = {f"{t}/{t}-{i}" for t in tenants for i in range(per_tenant)}
    keys = read_keys(out)
    assert set(keys) == expected
    assert [key for key, n in keys.items() if n > 1] == []
    ids = {engine.directory.tenant_id(t) for t in tenants}
    assert await counts(store) == {(tid, NotificationState.DELIVERED): per_tenant for tid in ids}
    assert engine.telemetry.totals().delivered == len(expected)
    assert engine.telemetry.totals().takeovers == 0


@pytest.mark.parametrize(
    ("provider_limit", "big_n"),
    [
        pytest.param(None, 20_000, id="provider-unlimited"),
        pytest.param(Limit(300.0, 30.0), 3_000, id="provider-limited"),
    ],
)
async def test_a_big_backlog_does_not_delay_a_small_tenant(
    make_engine: EngineFactory, store: Store, provider_limit: Limit | None, big_n: int
) -> None:
    """'big' has no limit of its own and a deep backlog, already draining; 'small' (20/s,
    burst 5) enqueues 40 and gets them out in about what its own rate implies: 35/20 s."""
    engine = await make_engine(concurrency=16)
    await engine.add_tenant("big")
    await engine.add_tenant("small", Limit(20.0, 5.0))
    await engine.add_provider("sim", "simulated", limit=provider_limit, options={"latency_ms": "2"})
    await enqueue(engine, "big", "sim", big_n)
    await engine.start()
    await eventually(lambda: engine.dispatcher.delivered >= 200, 10, "big under way")

    small_id = engine.directory.tenant_id("small")
    big_id = engine.directory.tenant_id("big")
    assert small_id is not None and big_id is not None
    started = time.time()
    await enqueue(engine, "small", "sim", 40)

    async def small_done() -> bool:
        rows = await engine.notifications("small", state=NotificationState.DELIVERED)
        return len(rows) == 40

    await eventually(small_done, 10, "small's 40 delivered")
    took_s = time.time() - started
    big_left = (await counts(store)).get((big_id, NotificationState.QUEUED), 0)
    await engine.stop()

    assert took_s < 3.5, f"small took {took_s:.2f}s behind big's backlog"
    assert big_left > 0.25 * big_n, "big drained too soon for this test to mean anything"
    sends = [e.ts for e in await store.queue.deliveries(small_id, limit=100)]
    assert len(sends) == 40
    check_envelope(sends, 20.0, 5.0, windows=(0.5, 1.0))
    assert max(sends) - min(sends) >= 35 / 20.0 * 0.9  # small's own limit still held it
