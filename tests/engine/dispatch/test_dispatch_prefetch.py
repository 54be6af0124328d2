"""Leases ahead of the free senders (``DispatcherSettings.prefetch``): with a slow provider a
claim no longer shrinks to the senders free at that instant. Only keys that no limit paces
lease ahead; a paced key's leases go first; a provider that asks to wait gets the leases
waiting for it back in the queue, and stopping returns every lease still waiting.

On virtual time: each store call takes 10 ms and each send 50 ms, so a claim costs a fifth of
a send, as on a real store with a slow provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from engine import (
    DispatcherSettings,
    EngineSettings,
    FakeClock,
    Limit,
    Message,
    NotificationState,
    ProviderConfig,
    ProviderFactory,
    SendResult,
    Store,
)
from engine.dispatch.work import WorkQueue
from engine.store import Leased
from testkit.envelope import check_envelope
from testkit.scripted import Script
from testkit.support import counts, enqueue_numbered
from testkit.virtual_time import VirtualEngines, until

QUEUED, LEASED = NotificationState.QUEUED, NotificationState.LEASED
SEND_S, STORE_S = 0.05, 0.01
CONCURRENCY = BATCH = 8


@pytest.fixture
async def engines(store: Store) -> AsyncIterator[VirtualEngines]:
    clock = FakeClock(autojump=True)
    opened = VirtualEngines(store, clock, {"slow": varied_kind(clock)}, store_latency_s=STORE_S)
    yield opened
    await opened.close()


def send_s(message: Message) -> float:
    """30 to 70 ms, by the notification's id: 50 ms on average."""
    return SEND_S * (0.6 + 0.2 * (message.notification_id % 5))


def varied_kind(clock: FakeClock) -> ProviderFactory:
    """Each send takes 30 to 70 ms (by its notification's id), and is delivered: senders come
    free one at a time, as they do with a real provider."""

    class Varied:
        def __init__(self, config: ProviderConfig) -> None:
            self.name = config.name

        async def send(self, message: Message) -> SendResult:
            await clock.sleep(send_s(message))
            return SendResult.delivered()

        async def aclose(self) -> None:
            """Nothing to release."""

    return Varied


def settings(prefetch: int | None) -> EngineSettings:
    return EngineSettings(
        dispatch=DispatcherSettings(concurrency=CONCURRENCY, batch=BATCH, prefetch=prefetch)
    )


async def drain_big(engines: VirtualEngines, prefetch: int | None, n: int) -> tuple[float, int]:
    """Drain ``n`` of an unlimited tenant through the slow provider; returns the virtual
    seconds until the last was delivered and the most leases out at once (sending or
    waiting)."""
    engine = await engines.open(settings(prefetch))
    tenant, provider = f"big{prefetch}", f"slow{prefetch}"
    await engine.tenant_add(tenant)
    await engine.provider_add(provider, "slow")
    await enqueue_numbered(engine, tenant, provider, n)
    most = 0
    real = engines.store.queue.claim

    async def claim(*args: object, **kwargs: object) -> list[Leased]:
        nonlocal most
        got = await real(*args, **kwargs)  # type: ignore[arg-type]
        most = max(most, engine.dispatcher.inflight + len(got))
        return got

    engines.store.queue.claim = claim  # type: ignore[method-assign]
    await engine.start()
    took_s = await until(
        engines.clock, lambda: engine.dispatcher.delivered == n, step_s=0.01, what="drained"
    )
    await engine.stop()
    engines.store.queue.claim = real  # type: ignore[method-assign]
    assert engine.dispatcher.delivered == n
    return took_s, most


@pytest.mark.slow
@pytest.mark.parametrize("ahead", [BATCH, None], ids=["prefetch=batch", "default"])
async def test_senders_stay_busy_with_a_slow_provider(
    engines: VirtualEngines, ahead: int | None
) -> None:
    """The default (``prefetch=None``) is one batch ahead."""
    ahead_s, ahead_most = await drain_big(engines, ahead, 400)
    plain_s, plain_most = await drain_big(engines, 0, 400)
    # The senders' own bound: 400 sends of 50 ms on average, 8 at a time. With leases ahead
    # a sender that comes free finds one waiting; without, it waits for the next claim.
    bound_s = 400 * SEND_S / CONCURRENCY
    assert ahead_s < 1.05 * bound_s + 2 * STORE_S, (ahead_s, bound_s)
    assert plain_s > 1.15 * ahead_s, (plain_s, ahead_s)
    # Bounded: the senders and the prefetch, never more.
    assert ahead_most <= CONCURRENCY + BATCH
    assert plain_most <= CONCURRENCY


def test_prefetch_defaults_to_one_batch_and_says_so_when_set() -> None:
    assert DispatcherSettings().ahead == DispatcherSettings().batch == 32
    assert DispatcherSettings(batch=64).ahead == 64
    assert DispatcherSettings(batch=64, prefetch=8).ahead == 8
    assert DispatcherSettings(prefetch=0).ahead == 0


async def test_stop_returns_the_leases_waiting_for_a_sender(
    engines: VirtualEngines, store: Store
) -> None:
    engine = await engines.open(settings(BATCH))
    await engine.tenant_add("big")
    await engine.provider_add("slow", "slow")
    await enqueue_numbered(engine, "big", "slow", 200)
    await engine.start()
    await until(
        engines.clock, lambda: engine.dispatcher.inflight > CONCURRENCY, what="leases ahead"
    )
    await engine.stop()
    big = engine.directory.tenant_id("big")
    assert big is not None
    found = await counts(store)
    assert (big, LEASED) not in found
    assert found[big, QUEUED] + engine.dispatcher.delivered == 200


async def test_a_paced_tenant_beside_one_leasing_ahead_keeps_its_pace_and_its_tokens(
    engines: VirtualEngines, store: Store
) -> None:
    """'small' (20/s, burst 2) beside 'big' (no limit) leasing ahead: small's leases go before
    big's waiting ones, so its tokens do not go stale and it sends at its own rate."""
    engine = await engines.open(settings(BATCH))
    await engine.tenant_add("big")
    await engine.tenant_add("small", Limit(20.0, 2.0))
    await engine.provider_add("slow", "slow")
    await enqueue_numbered(engine, "big", "slow", 3000)
    await engine.start()
    await until(engines.clock, lambda: engine.dispatcher.delivered >= 100, what="big under way")
    started = engines.clock.monotonic()
    await enqueue_numbered(engine, "small", "slow", 40)
    small = engine.directory.tenant_id("small")
    assert small is not None

    async def small_done() -> bool:
        return (await counts(store)).get((small, NotificationState.DELIVERED), 0) == 40

    await until(engines.clock, small_done, step_s=0.05, what="small's 40 delivered")
    took_s = engines.clock.monotonic() - started
    await engine.stop()
    assert took_s < 38 / 20.0 + 0.3, f"small took {took_s:.2f}s beside big's prefetch"
    # Its leases wait only for the senders expected to come free within the token lag; a
    # send that runs long still leaves one stale now and then (taken again, the stale one
    # given back as far as its bucket has room): 2 with one claim per pair, 3 on Postgres
    # since a round serves a line's pairs together, 4 on SQLite since a stale token went
    # back (the bucket granted small's next claim sooner, and it met busy senders once more).
    assert engine.totals().stale_tokens <= 4
    sends = [e.ts for e in await store.notifications.deliveries(small, limit=100)]
    check_envelope(sends, 20.0, 2.0, windows=(0.25, 0.5, 1.0))


async def test_a_throttle_returns_the_leases_waiting_for_that_provider(
    engines: VirtualEngines, store: Store
) -> None:
    """The 21st send is throttled for 5 s, while leases wait for senders. The ones waiting
    for that provider go back to the queue rather than out during the hold."""
    clock = engines.clock
    script = Script(clock)
    engines.factories["scripted"] = script.provider

    async def slowly(message: Message) -> SendResult:
        await clock.sleep(send_s(message))
        return SendResult.delivered()

    out_then: list[int] = []

    async def throttled(message: Message) -> SendResult:
        out_then.append(engine.dispatcher.inflight)
        return SendResult.throttled(5.0)

    script.answers.extend([slowly] * 20)
    script.answers.append(throttled)
    script.answers.extend([slowly] * 400)
    engine = await engines.open(settings(BATCH))
    await engine.tenant_add("big")
    await engine.provider_add("p", "scripted")
    await enqueue_numbered(engine, "big", "p", 100)
    await engine.start()
    await until(clock, lambda: len(script.calls) >= 21, what="the throttled send")
    assert out_then[0] > CONCURRENCY  # leases were waiting for senders then
    throttled_at = script.calls[20].at_s
    await clock.sleep(1.0)
    big = engine.directory.tenant_id("big")
    assert big is not None
    during = await counts(store)
    sent_during = [c for c in script.calls if throttled_at < c.at_s < throttled_at + 5.0]
    # No send began during the hold (those under way when the answer came finish), and no
    # lease is kept through it.
    assert sent_during == []
    assert during.get((big, LEASED), 0) == 0, during
    await engines.until_empty(engine)
    await engine.stop()
    assert engine.dispatcher.delivered == 100


def lease(n: int, tenant: int, provider: int = 1) -> Leased:
    return Leased(n, tenant, provider, "r", {}, f"k{n}", 1, 0, 3, 0.0, "w", 30.0)


async def test_work_queue_takes_keys_in_turn_paced_first() -> None:
    work = WorkQueue(FakeClock())
    for n in range(3):
        work.put((1, 1), [lease(n, 1)], 0.0, paced=False)
    work.put((2, 1), [lease(10, 2)], 0.0, paced=False)
    work.put((3, 2), [lease(20, 3, 2)], 0.0, paced=True)
    assert len(work) == 5 and work.paced == 1
    got: list[int] = []
    for _ in range(3):
        entry = await work.get()
        assert entry is not None
        got.append(entry[0][0].id)
    # The paced lease first, then the keys in turn: not key (1, 1)'s whole line first.
    assert got == [20, 0, 10]
    work.put((2, 1), [lease(11, 2)], 0.0, paced=False)
    assert [x.id for x in work.take_provider(1)] == [1, 2, 11]
    assert len(work) == 0
    work.put((3, 2), [lease(21, 3, 2)], 0.0, paced=True)
    work.close_one()
    assert [x.id for x in work.take_all()] == [21]
    assert len(work) == 0 and work.paced == 0
    work.close_one()
    assert await work.get() is None  # a sender told to exit, past the stale tickets


async def test_work_queue_wakes_senders_in_turn_and_passes_on_a_cancelled_wake() -> None:
    work = WorkQueue(FakeClock())
    first = asyncio.create_task(work.get())
    second = asyncio.create_task(work.get())
    await asyncio.sleep(0)  # both wait, the first in front
    work.put((1, 1), [lease(1, 1)], 0.0, paced=False)
    first.cancel()  # woken for the parcel, and cancelled before it ran: the next one takes it
    entry = await asyncio.wait_for(second, 1.0)
    assert entry is not None and entry[0][0].id == 1
    assert first.cancelled()
    third = asyncio.create_task(work.get())
    fourth = asyncio.create_task(work.get())
    await asyncio.sleep(0)
    work.put((2, 1), [lease(2, 2)], 0.0, paced=False)
    work.close_one()
    assert (await third) is not None and (await fourth) is None  # first come, first served


async def test_room_for_paced_and_unpaced_keys() -> None:
    clock = FakeClock()
    work = WorkQueue(clock)
    dispatch = DispatcherSettings(concurrency=8, batch=8, prefetch=8, token_lag_s=0.01)
    work.sent(0.04)  # the sends take 40 ms
    for n in range(8):  # a sender took one every 5 ms: the first at 0 ms, the last at 35 ms
        if n:
            clock.advance(0.005)
        work.put((3, 1), [lease(100 + n, 3)], 0.0, paced=False)
        assert await work.get() is not None
    assert work.busy == 8 and len(work) == 0
    assert work.room(dispatch, 8, paced=True) == 0  # all busy, none waiting: the free ones
    for n in range(5):
        work.put((1, 1), [lease(n, 1)], 0.0, paced=False)
    assert work.room(dispatch, 8, paced=False) == 3  # 8 + 8 - 13
    # Leases wait: the senders whose sends end within 10 ms (begun by 35 + 10 - 40 = 5 ms)
    # count: the ones that began at 0 and at 5 ms.
    assert work.room(dispatch, 8, paced=True) == 2
    work.put((2, 1), [lease(9, 2)], 0.0, paced=True)
    assert work.room(dispatch, 8, paced=True) == 1  # one of them is spoken for
    plain = DispatcherSettings(concurrency=8, batch=8, prefetch=0, token_lag_s=0.01)
    assert work.room(plain, 8, paced=False) == -6
    assert not work.full(dispatch, 8)
    assert work.full(plain, 8)
    work.end(100)
    assert work.busy == 7
