"""What the dispatcher reads from the store to know which keys have due work: behind a deep
backlog a look at every key costs more than an enqueue, so a small tenant's own enqueues are
counted in without one, and a key whose count runs out is looked at alone."""

from __future__ import annotations

from collections.abc import Sequence

from engine import DispatcherSettings, EngineSettings, Limit, NotificationState, Store
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
