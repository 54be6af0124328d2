"""What the dispatcher reads from the store to know which keys have due work: behind a deep
backlog a look at every key costs more than an enqueue, so a small tenant's own enqueues are
counted in without one, and a key whose count runs out is looked at alone."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from engine import (
    BucketKey,
    DispatcherSettings,
    EngineSettings,
    Limit,
    NotificationState,
    Reservation,
    Store,
    TenantSpec,
)
from engine.store import DueKey
from tests.support import enqueue_numbered
from tests.virtual_time import VirtualEngines, until


async def test_a_small_tenants_enqueues_beside_a_backlog_need_no_look_at_every_key(
    engines: VirtualEngines, store: Store
) -> None:
    clock = engines.clock
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=8, poll_s=60.0))
    engine = await engines.open(settings)
    await engine.add_tenant("big", Limit(50.0, 5.0))
    await engine.add_tenant("small")
    await engine.add_provider("sim", "scripted")
    await enqueue_numbered(engine, "big", "sim", 2000)
    real = store.queue.due_keys
    looks: list[tuple[tuple[int, int], ...] | None] = []

    async def due_keys(
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        keys: Sequence[tuple[int, int]] | None = None,
    ) -> list[DueKey]:
        looks.append(None if keys is None else tuple(keys))
        return await real(now, tenant_ids, keys=keys)

    store.queue.due_keys = due_keys  # type: ignore[method-assign]
    await engine.start()
    await until(clock, lambda: engine.dispatcher.delivered >= 20, what="big under way")
    small_id = engine.directory.tenant_id("small")
    big_id = engine.directory.tenant_id("big")
    assert small_id is not None and big_id is not None
    sim_id = engine.directory.provider_id("sim")
    looks.clear()
    for n in range(20):
        await engine.enqueue("small", "sim", f"s{n}@example.com", {"n": n}, key=f"s{n}")
        await clock.sleep(0.1)

    async def small_done() -> bool:
        rows = await engine.notifications("small", state=NotificationState.DELIVERED)
        return len(rows) == 20

    await until(clock, small_done, what="small's 20 delivered")
    await engine.stop()
    # Each small enqueue was counted in, and each time its count ran out only its key was
    # looked at again: no look at every key (the backlog's too), which the poll (60 s) would
    # have made anyway.
    assert None not in looks, looks
    assert looks and set(looks) == {((small_id, sim_id),)}
    assert len(looks) <= 20


async def test_many_small_tenants_cost_looks_and_asks_in_proportion_to_the_sends(
    engines: VirtualEngines, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """400 tenants at 2/s (burst 1), three rows each: most keys have work and no tokens at any
    instant. They wait for their buckets rather than being asked every round, and the store
    is never probed key by key for all of them: each key is looked at alone only when its
    count runs out, and the kept counts are read at the poll."""
    clock = engines.clock
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=16, poll_s=0.5))
    engine = await engines.open(settings)
    tenants = [f"t{i:03d}" for i in range(400)]
    await engine.import_tenants([TenantSpec(name, Limit(2.0, 1.0)) for name in tenants])
    await engine.add_provider("sim", "scripted")
    for name in tenants:
        await enqueue_numbered(engine, name, "sim", 3)
    probed: list[int] = []
    counted: list[float] = []
    asks = 0
    real_keys, real_counts = store.queue.due_keys, store.queue.queued_counts
    real_reserve = engine.limiter.reserve

    async def due_keys(
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        keys: Sequence[tuple[int, int]] | None = None,
    ) -> list[DueKey]:
        assert keys is not None, "a look at every key"
        probed.append(len(keys))
        return await real_keys(now, tenant_ids, keys=keys)

    async def queued_counts() -> dict[tuple[int, int], int]:
        counted.append(clock.monotonic())
        return await real_counts()

    async def reserve(keys: Sequence[BucketKey], n: int) -> Reservation:
        nonlocal asks
        asks += 1
        return await real_reserve(keys, n)

    monkeypatch.setattr(store.queue, "due_keys", due_keys)
    monkeypatch.setattr(store.queue, "queued_counts", queued_counts)
    monkeypatch.setattr(engine.limiter, "reserve", reserve)
    started = clock.monotonic()
    await engine.start()
    took_s = await engines.until_empty(engine)
    await engine.stop()
    assert engine.dispatcher.delivered == 1200
    # The rates allow 400 + 800/s: the last rows go out at about 1 s.
    assert took_s < 2.0, took_s
    # One ask per send, and for each key a few that its bucket answered "not yet" (its
    # refill comes while the provider line is busy): far from one per key per round.
    assert asks <= 1200 * 2, asks
    assert sum(probed) <= 400 * 2, sum(probed)  # once per key as it drains (and a retry)
    assert len(counted) <= (clock.monotonic() - started) / 0.5 + 2, counted
