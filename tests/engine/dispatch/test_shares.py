"""Tenants shared out among the live workers (engine/dispatch/share.py): each tenant's keys
served by one worker, deep keys by all, a silent worker's tenants taken over, nothing starved.

The sharing itself is pure and checked at fixed lists of workers; then engines on one store
and virtual time show it carried out: two workers lease disjoint tenants and no claim of one
finds rows the other took, and a worker that went silent (a heartbeat row that stops) leaves
its tenants to the others once its heartbeat is ``worker_ttl_s`` old, within its leases.
"""

from __future__ import annotations

import asyncio

import pytest

from engine import (
    Engine,
    EngineSettings,
    EnqueueItem,
    FakeClock,
    NotificationState,
    TenantSpec,
    WorkerRecord,
)
from engine.dispatch.share import SHARED_DEPTH, Shares
from engine.store import Share, share_index
from testkit.scripted import Script
from testkit.virtual_time import VirtualEngines, until

WORKERS = ("w-a", "w-b", "w-c", "w-d")


def views(workers: tuple[str, ...]) -> list[Shares]:
    made = []
    for me in workers:
        shares = Shares(me)
        shares.set_workers(workers)
        made.append(shares)
    return made


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_each_tenant_has_exactly_one_owner_and_the_shares_are_even(count: int) -> None:
    shares = views(WORKERS[:count])
    owned = [sum(s.mine(t) for t in range(1, 10_001)) for s in shares]
    for tenant in range(1, 10_001):
        assert sum(s.mine(tenant) for s in shares) == 1
    assert sum(owned) == 10_000
    assert max(owned) - min(owned) <= 0.05 * 10_000 / count, owned


def test_alone_every_tenant_is_mine_and_the_list_always_holds_me() -> None:
    shares = Shares("w-a")
    assert shares.alone and all(shares.mine(t) for t in range(100))
    assert shares.set_workers(["w-b"])  # itself is added: two workers
    assert shares.workers == ("w-a", "w-b") and shares.share is not None
    assert not shares.set_workers(["w-b", "w-a"])  # the same list, in another order
    assert shares.set_workers([])
    assert list(shares.workers) == ["w-a"] and shares.share is None


def test_a_deep_key_is_served_by_every_worker_a_shallow_one_by_its_owner() -> None:
    shares = views(WORKERS)
    tenant = 7
    assert [s.serves(tenant, SHARED_DEPTH) for s in shares] == [True] * 4
    assert sum(s.serves(tenant, SHARED_DEPTH - 1) for s in shares) == 1


def test_a_worker_that_leaves_hands_its_tenants_to_the_others() -> None:
    before = views(WORKERS)
    after = views(WORKERS[:3])
    for tenant in range(1, 2_001):
        assert sum(s.mine(tenant) for s in after) == 1
    gone = [t for t in range(1, 2_001) if before[3].mine(t)]
    assert gone and all(any(s.mine(t) for s in after) for t in gone)


async def _tenants(engine: Engine, count: int, rows: int) -> None:
    await engine.tenant_import([TenantSpec(f"t{i:03d}", None) for i in range(count)])
    await engine.provider_add("p", "scripted")
    for i in range(count):
        items: list[EnqueueItem] = [
            EnqueueItem("p", f"u{j}@example.com", {}, None, 0) for j in range(rows)
        ]
        await engine.enqueue_many(f"t{i:03d}", items)


async def test_two_workers_lease_disjoint_tenants_and_find_no_rows_taken(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    first = await engines.open(EngineSettings(share_tenants=True))
    second = await engines.open(EngineSettings(share_tenants=True))
    await first.start()
    await second.start()
    # The heartbeat after both started (its timer runs on the real clock, so it is called
    # here): each sees the other.
    await first._heartbeat()
    assert len(first.dispatcher.shares.workers) == len(second.dispatcher.shares.workers) == 2
    await _tenants(first, 40, 3)
    await second._refresh()  # the other process learns the new tenants (a real-clock timer)
    await engines.until_empty(first, within_s=60)
    await until(clock, lambda: not second.dispatcher.has_pending(), within_s=10)

    served = []
    for engine in (first, second):
        snap = await engine.snapshot()
        assert snap.totals.claims_empty == 0
        served.append({pair.tenant for pair in snap.outcomes if pair.delivered})
    assert served[0] and served[1] and not served[0] & served[1]
    assert len(served[0] | served[1]) == 40
    assert sum(engine.totals().delivered for engine in (first, second)) == 120
    assert len(script.calls) == 120


async def test_a_silent_workers_tenants_are_served_once_its_heartbeat_is_old(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    settings = EngineSettings(share_tenants=True)
    engine = await engines.open(settings)
    now = clock.wall()
    ghost = WorkerRecord("ghost", "elsewhere", 1, now, now, "running", 16, 0)
    await engine.store.workers.heartbeat(ghost)  # and never again: it died
    await engine.start()
    assert len(engine.dispatcher.shares.workers) == 2
    await _tenants(engine, 40, 2)

    async def beat() -> None:  # heartbeats every 2 s of virtual time (their timer is real)
        while True:
            await clock.sleep(settings.heartbeat_s)
            await engine._heartbeat()

    beating = asyncio.ensure_future(beat())
    try:
        took_s = await engines.until_empty(engine, within_s=120)
    finally:
        beating.cancel()
    # The ghost's tenants waited for its heartbeat to age out, then went out: nothing starved.
    assert settings.worker_ttl_s - 5 <= took_s < settings.worker_ttl_s + 10, took_s
    assert engine.dispatcher.shares.alone
    rows = await engine.store.notifications.depth()
    delivered = sum(r.count for r in rows if r.state is NotificationState.DELIVERED)
    assert delivered == 80 and len(script.calls) == 80


async def test_the_stores_read_of_a_share_matches_share_index(engines: VirtualEngines) -> None:
    """The counts a worker reads for its share (SQL) are the keys ``share_index`` gives it
    (Python), and the deep keys: the two computations must never disagree."""
    engine = await engines.open(EngineSettings(share_tenants=True))
    await _tenants(engine, 60, 1)
    deep: list[EnqueueItem] = [
        EnqueueItem("p", f"d{j}@example.com", {}, None, 0) for j in range(SHARED_DEPTH)
    ]
    await engine.enqueue_many("t007", deep)
    everything = await engine.store.queue.queued_counts()
    assert len(everything) == 60
    for workers in (2, 3, 4, 7):
        seen: list[tuple[int, int]] = []
        for index in range(workers):
            part = await engine.store.queue.queued_counts(Share(index, workers, SHARED_DEPTH))
            expected = {
                key: n
                for key, n in everything.items()
                if share_index(key[0], workers) == index or n >= SHARED_DEPTH
            }
            assert part == expected
            seen += part
        assert set(seen) == set(everything)
