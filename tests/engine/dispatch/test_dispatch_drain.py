"""Draining a queue with real engines on a real store: exactly once, at scale, and fairly.

Fairness under limits runs on virtual time (testkit/virtual_time.py). The ``test_real_time_*``
runs use the system clock: twenty engines on two connection pools, and ten thousand
notifications, where nothing waits on time and the store sets the pace."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    FakeClock,
    Limit,
    LocalLimiter,
    NotificationState,
    Outcome,
    SecretBox,
    Store,
    SystemClock,
)
from testkit.envelope import check_envelope
from testkit.stores import EngineFactory
from testkit.support import counts, enqueue_numbered, eventually, read_lines
from testkit.virtual_time import VirtualEngines, latency_kind, until

Stores = Callable[[], Awaitable[Store]]


async def all_delivered(store: Store, total: int) -> bool:
    found = await counts(store)
    delivered = sum(n for (_, state), n in found.items() if state is NotificationState.DELIVERED)
    return delivered == total


def read_keys(path: Path) -> Counter[str]:
    return Counter(f"{line['tenant']}/{line['idempotency_key']}" for line in read_lines(path))


@pytest.fixture
async def engines(store: Store) -> AsyncIterator[VirtualEngines]:
    """Engines on virtual time, on a store that takes 20 ms a call, with the kind 'sim': each
    send takes 2 ms and is delivered."""
    clock = FakeClock(autojump=True)
    opened = VirtualEngines(store, clock, {"sim": latency_kind(clock, 0.002)}, store_latency_s=0.02)
    yield opened
    await opened.close()


@pytest.fixture
async def second_store(store_url: str, box: SecretBox) -> AsyncIterator[Store]:
    """Another Store object on the test's database: another pool, as another process has."""
    async with Store(store_url, box) as s:
        yield s


async def test_real_time_twenty_workers_drain_three_hundred_exactly_once(
    store: Store, second_store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=2))
    engines = [
        Engine(s, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
        for s in [store, second_store] * 10
    ]
    try:
        await engines[0].tenant_add("acme")
        await engines[0].provider_add("f", "file", options={"path": str(out)})
        await enqueue_numbered(engines[0], "acme", "f", 300)
        for engine in engines:
            await engine.open()
        await asyncio.gather(*(engine.start() for engine in engines))
        await eventually(lambda: all_delivered(store, 300), 30, "300 delivered")
        await asyncio.gather(*(engine.stop() for engine in engines))

        assert len({engine.worker_id for engine in engines}) == 20
        keys = read_keys(out)
        assert keys == Counter({f"acme/acme-{i}": 1 for i in range(300)})
        tenant_id = engines[0].directory.tenant_id("acme")
        assert tenant_id is not None
        assert await counts(store) == {(tenant_id, NotificationState.DELIVERED): 300}
        log = await store.notifications.deliveries(tenant_id, limit=1000)
        assert len({entry.notification_id for entry in log}) == len(log) == 300
        assert {entry.outcome for entry in log} == {Outcome.DELIVERED}
        # The work was shared (with instant sends, one worker whose claims come back first
        # can drain a hundred before the others' first claims are answered).
        assert len({entry.worker for entry in log}) > 1
        assert sum(engine.dispatcher.delivered for engine in engines) == 300
        assert sum(engine.telemetry.totals().takeovers for engine in engines) == 0
    finally:
        for engine in engines:
            await engine.close()


@pytest.mark.slow
async def test_real_time_ten_thousand_across_five_tenants_none_lost_none_twice(
    make_engine: EngineFactory, store: Store, tmp_path: Path
) -> None:
    """Nothing waits on time here (no limits, instant sends): the store sets the pace, and
    virtual time would only serialise what real time overlaps."""
    tenants, per_tenant = [f"t{i}" for i in range(5)], 2000
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=64)
    for tenant in tenants:
        await engine.tenant_add(tenant)
    await engine.provider_add("f", "file", options={"path": str(out)})
    for tenant in tenants:
        await enqueue_numbered(engine, tenant, "f", per_tenant)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=120)
    await engine.stop()

    expected = {f"{t}/{t}-{i}" for t in tenants for i in range(per_tenant)}
    keys = read_keys(out)
    assert set(keys) == expected
    assert [key for key, n in keys.items() if n > 1] == []
    ids = {engine.directory.tenant_id(t) for t in tenants}
    assert await counts(store) == {(tid, NotificationState.DELIVERED): per_tenant for tid in ids}
    assert engine.totals().delivered == len(expected)
    assert engine.totals().takeovers == 0


@pytest.mark.parametrize(
    "provider_limit",
    [
        pytest.param(None, id="provider-unlimited"),
        pytest.param(Limit(300.0, 30.0), id="provider-limited"),
    ],
)
async def test_a_big_backlog_does_not_delay_a_small_tenant(
    engines: VirtualEngines, store: Store, provider_limit: Limit | None
) -> None:
    """'big' has no limit of its own and a deep backlog, already draining; 'small' (20/s,
    burst 5) enqueues 40 and gets them out in what its own rate implies: 35/20 s."""
    big_n, clock = 3000, engines.clock
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(concurrency=16)))
    await engine.tenant_add("big")
    await engine.tenant_add("small", Limit(20.0, 5.0))
    await engine.provider_add("sim", "sim", limit=provider_limit)
    await enqueue_numbered(engine, "big", "sim", big_n)
    await engine.start()
    await until(clock, lambda: engine.dispatcher.delivered >= 200, what="big under way")

    small_id = engine.directory.tenant_id("small")
    big_id = engine.directory.tenant_id("big")
    assert small_id is not None and big_id is not None
    started = clock.monotonic()
    await enqueue_numbered(engine, "small", "sim", 40)

    async def small_done() -> bool:
        rows = await engine.notifications("small", state=NotificationState.DELIVERED)
        return len(rows) == 40

    await until(clock, small_done, step_s=0.05, what="small's 40 delivered")
    took_s = clock.monotonic() - started
    big_left = (await counts(store)).get((big_id, NotificationState.QUEUED), 0)
    await engine.stop()

    assert took_s < 35 / 20.0 + 0.25, f"small took {took_s:.2f}s behind big's backlog"
    assert big_left > 0.25 * big_n, "big drained too soon for this test to mean anything"
    sends = [e.ts for e in await store.notifications.deliveries(small_id, limit=100)]
    assert len(sends) == 40
    check_envelope(sends, 20.0, 5.0, windows=(0.5, 1.0))
    assert max(sends) - min(sends) >= 35 / 20.0 - 1e-6  # small's own limit held it
