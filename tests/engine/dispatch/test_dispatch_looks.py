"""What the dispatcher reads from the store to know which keys have due work: behind a deep
backlog a look at every key costs more than an enqueue, so a small tenant's own enqueues are
counted in without one, and a key whose count runs out is looked at alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engine import (
    BucketKey,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    FakeClock,
    Limit,
    NotificationState,
    Reservation,
    Store,
    TenantSpec,
)
from engine.store import DuePair, Share
from testkit.support import enqueue_numbered
from testkit.virtual_time import VirtualEngines, latency_kind, until


async def test_a_small_tenants_enqueues_beside_a_backlog_need_no_look_at_every_key(
    engines: VirtualEngines, store: Store
) -> None:
    clock = engines.clock
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=8, poll_s=60.0))
    engine = await engines.open(settings)
    await engine.tenant_add("big", Limit(50.0, 5.0))
    await engine.tenant_add("small")
    await engine.provider_add("sim", "scripted")
    await enqueue_numbered(engine, "big", "sim", 2000)
    real = store.queue.due_pairs
    looks: list[tuple[tuple[int, int], ...] | None] = []

    async def due_pairs(
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        looks.append(None if pairs is None else tuple(pairs))
        return await real(now, tenant_ids, pairs=pairs)

    store.queue.due_pairs = due_pairs  # type: ignore[method-assign]
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
    # Each small enqueue was counted in, exactly, so a count that ran out needs no look: no
    # look at every key (the backlog's too), which the poll (60 s) would have made anyway,
    # and at most a look at the small key alone.
    assert None not in looks, looks
    assert set(looks) <= {((small_id, sim_id),)}, looks
    assert len(looks) <= 20


@pytest.mark.slow
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
    await engine.tenant_import([TenantSpec(name, Limit(2.0, 1.0)) for name in tenants])
    await engine.provider_add("sim", "scripted")
    for name in tenants:
        await enqueue_numbered(engine, name, "sim", 3)
    probed: list[int] = []
    counted: list[float] = []
    asks = 0
    real_pairs, real_counts = store.queue.due_pairs, store.queue.queued_counts
    real_reserve = engine.limiter.reserve

    async def due_pairs(
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        assert pairs is not None, "a look at every pair"
        probed.append(len(pairs))
        return await real_pairs(now, tenant_ids, pairs=pairs)

    async def queued_counts(share: Share | None = None) -> dict[tuple[int, int], int]:
        counted.append(clock.monotonic())
        return await real_counts(share)

    async def reserve(keys: Sequence[BucketKey], n: int) -> Reservation:
        nonlocal asks
        asks += 1
        return await real_reserve(keys, n)

    monkeypatch.setattr(store.queue, "due_pairs", due_pairs)
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


async def _paced_tenants(
    store: Store,
    clock: FakeClock,
    *,
    tenants: int,
    limit: Limit,
    rows: int,
    concurrency: int,
    send_s: float,
) -> tuple[VirtualEngines, Engine]:
    """``tenants`` tenants at ``limit`` with ``rows`` due each on one provider whose sends take
    ``send_s``, and an engine of ``concurrency`` senders on virtual time (not started)."""
    engines = VirtualEngines(store, clock, {"lat": latency_kind(clock, send_s)})
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=concurrency, poll_s=60.0))
    engine = await engines.open(settings)
    names = [f"t{i:04d}" for i in range(tenants)]
    await engine.tenant_import([TenantSpec(name, limit) for name in names])
    await engine.provider_add("sim", "lat")
    for name in names:
        items: list[EnqueueItem] = [
            EnqueueItem("sim", f"{name}@example.com", {}, f"{name}-{j}", 0) for j in range(rows)
        ]
        await engine.enqueue_many(name, items)
    return engines, engine


def _count_claims(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one entry (the keys asked) per ``claim_many`` of ``store``."""
    claims: list[int] = []
    real_claim = store.queue.claim_many

    async def claim_many(asks: Any, **kwargs: Any) -> Any:
        claims.append(len(asks))
        return await real_claim(asks, **kwargs)

    monkeypatch.setattr(store.queue, "claim_many", claim_many)
    return claims


async def test_visits_that_lease_nothing_are_bounded_by_the_rounds_not_by_the_keys(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 paced keys of two rows each, four senders, sends of 50 ms: the senders are full
    most of the time. A round that finds no room for a paced key does not walk the line of
    a thousand keys to learn it (each visit an ask of 0): it stops, and the next send that
    ends wakes it. And a claim serves many keys at once, so the claims are far fewer than
    the keys served."""
    engines, engine = await _paced_tenants(
        store, clock, tenants=1000, limit=Limit(20.0, 10.0), rows=2, concurrency=4, send_s=0.05
    )
    dispatcher = engine.dispatcher
    rounds = empty = 0
    real_round, real_serve = dispatcher._round, dispatcher._serve_line
    claims = _count_claims(store, monkeypatch)

    async def counted_round() -> float:
        nonlocal rounds
        rounds += 1
        return await real_round()

    async def serve_line(line: Any, *, probing: bool) -> tuple[int, int]:
        nonlocal empty
        visited, leased = await real_serve(line, probing=probing)
        empty += leased == 0
        return visited, leased

    monkeypatch.setattr(dispatcher, "_round", counted_round)
    monkeypatch.setattr(dispatcher, "_serve_line", serve_line)
    try:
        await engine.start()
        await until(clock, lambda: dispatcher.delivered >= 600, what="600 delivered")
        await engine.stop()
    finally:
        await engines.close()
    assert rounds > 0
    assert empty <= rounds, (empty, rounds)  # at most one empty visit a round, not one a key
    # Four senders take at most four sends a claim; the claims are bounded by the sends.
    assert len(claims) <= dispatcher.delivered, (len(claims), dispatcher.delivered)


@pytest.mark.slow
async def test_keys_held_by_their_own_buckets_share_a_claim(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 tenants at 20/s (burst 2), deep backlogs: the tenants' buckets, not the senders,
    hold the pace, and each key's bucket grants a token or two at a time. A claim asks many
    keys for what the senders can take (their buckets have granted a small share of what was
    asked lately) and gives back what overshoots, so a claim leases for several keys instead
    of one key's token or two."""
    engines, engine = await _paced_tenants(
        store, clock, tenants=100, limit=Limit(20.0, 2.0), rows=40, concurrency=32, send_s=0.005
    )
    dispatcher = engine.dispatcher
    claims = _count_claims(store, monkeypatch)
    try:
        await engine.start()
        started = clock.monotonic()
        await until(clock, lambda: dispatcher.delivered >= 3000, what="3,000 delivered")
        took_s = clock.monotonic() - started
        await engine.stop()
    finally:
        await engines.close()
    assert dispatcher.delivered <= 100 * (2 + 20 * took_s) + 100  # within every envelope
    assert took_s < 3000 / 2000 * 1.15, took_s  # near the tenants' 2,000/s
    assert len(claims) * 4 <= dispatcher.delivered, (len(claims), dispatcher.delivered)


@pytest.mark.slow
async def test_a_few_deep_backlogs_take_a_turn_each_not_the_small_tenants_turns(
    store: Store, clock: FakeClock
) -> None:
    """10 tenants with deep backlogs whose limits (20/s each) together take the whole
    provider (200/s), beside 300 tenants with one notification each: the provider's line is
    shared by turns. A deep key leases a few in its turn (not all its bucket holds), so the
    small ones, alone 1.5 s of the provider's time, are all sent within 2 s."""
    engines = VirtualEngines(store, clock, {"lat": latency_kind(clock, 0.005)})
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=32, poll_s=60.0))
    engine = await engines.open(settings)
    big = [f"big{i:02d}" for i in range(10)]
    small = [f"small{i:03d}" for i in range(300)]
    await engine.tenant_import([TenantSpec(name, Limit(20.0, 10.0)) for name in [*big, *small]])
    await engine.provider_add("sim", "lat", Limit(200.0, 50.0))
    for name in big:
        await enqueue_numbered(engine, name, "sim", 200)
    for name in small:
        await enqueue_numbered(engine, name, "sim", 1)

    async def smalls_sent() -> bool:
        depth = (await engine.snapshot()).depth
        return sum(d.delivered for d in depth if d.tenant in small) == len(small)

    try:
        await engine.start()
        started = clock.monotonic()
        await until(clock, smalls_sent, step_s=0.05, what="the small tenants' 300")
        took_s = clock.monotonic() - started
        await engine.stop()
    finally:
        await engines.close()
    assert took_s < 2.0, took_s  # 2.55 s when a deep key took all its bucket held
