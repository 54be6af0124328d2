"""The dispatcher's waits, on virtual time: the back-off while the store is down, outcomes
written again after a failed write, the send and stop timeouts, and a retry that falls due
while the dispatcher is looking. Each waits exactly what its policy says."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from engine import (
    CircuitState,
    DispatcherSettings,
    EngineSettings,
    Message,
    NotificationState,
    Outcome,
    RetryPolicy,
    SendResult,
    StoreUnavailable,
)
from engine.core.policy import STORE_OUTAGE, WRITE_RETRY
from engine.store import Completion, DuePair, Leased, Share
from testkit.scripted import Script, history, setup, view
from testkit.virtual_time import VirtualEngines, until

GATHER_S = 0.005  # the completer's pause before writing a batch

NO_JITTER = RetryPolicy(base_s=1.0, jitter=0.0)


async def hang(message: Message) -> SendResult:
    await asyncio.Event().wait()
    raise AssertionError("never set")


def down() -> StoreUnavailable:
    return StoreUnavailable("the store cannot be reached: test.")


async def test_a_store_outage_backs_off_slower_and_slower_then_carries_on(
    engines: VirtualEngines, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(poll_s=60.0)))
    await setup(engine)
    queue = engine.store.queue
    real_counts, real_claim, failing = queue.queued_counts, queue.claim_many, 6
    calls: list[float] = []  # the dispatcher's reads of the counts and claims, while down

    def outage() -> None:
        nonlocal failing
        calls.append(engines.clock.monotonic())
        if failing:
            failing -= 1
            raise down()

    async def queued_counts(share: Share | None = None) -> dict[tuple[int, int], int]:
        outage()
        return await real_counts(share)

    async def claim_many(
        asks: Sequence[tuple[int, int, int]], *, owner: str, lease_s: float, now: float
    ) -> list[list[Leased]]:
        outage()
        return await real_claim(asks, owner=owner, lease_s=lease_s, now=now)

    monkeypatch.setattr(queue, "queued_counts", queued_counts)
    monkeypatch.setattr(queue, "claim_many", claim_many)
    sleeps: list[float] = []
    engine.dispatcher.on_wait = sleeps.append
    await engine.start()
    await engines.until_empty(engine)

    backoff = [STORE_OUTAGE.delay_s(n) for n in range(1, 7)]
    assert backoff == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert sleeps[:6] == backoff
    # Each step met the outage once (a read of the counts under way while the round claimed
    # is met at the next step) and tried again as its back-off ended (sooner if woken:
    # Postgres's LISTEN wakes the dispatcher once connected); it sent once the store answered.
    [call] = script.calls
    assert calls[0] < call.at_s <= calls[0] + sum(backoff) + 1e-6
    assert call.at_s == pytest.approx(calls[-1])  # the claim that worked


async def test_outcomes_that_could_not_be_written_are_written_again(
    engines: VirtualEngines, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await engines.open()
    [nid] = await setup(engine)
    real, failing = engine.store.queue.complete, 2
    writes: list[float] = []

    async def complete(completions: Sequence[Completion], *, worker: str) -> list[bool]:
        nonlocal failing
        writes.append(engines.clock.monotonic())
        if failing:
            failing -= 1
            raise down()
        return await real(completions, worker=worker)

    monkeypatch.setattr(engine.store.queue, "complete", complete)
    await engine.start()
    await engines.until_empty(engine)

    [call] = script.calls
    every_s = WRITE_RETRY.delay_s(1) + GATHER_S
    assert [w - call.at_s for w in writes] == pytest.approx(
        [GATHER_S, GATHER_S + every_s, GATHER_S + 2 * every_s]
    )
    assert (await view(engine, nid)).state is NotificationState.DELIVERED
    assert engine.totals().delivered == 1


async def test_a_send_that_does_not_answer_times_out_and_is_held_without_spending_an_attempt(
    engines: VirtualEngines, script: Script
) -> None:
    """The dispatcher's own send timeout is the provider's fault (UNAVAILABLE): the circuit
    holds the notification, queued again after its back-off (circuit_backoff_s, 5 s), not the
    retry policy's; no attempt is spent, and one such failure leaves the circuit closed."""
    settings = DispatcherSettings(send_timeout_s=30.0, retry=NO_JITTER)
    engine = await engines.open(EngineSettings(dispatch=settings))
    script.answers.append(hang)
    [nid] = await setup(engine)
    await engine.start()
    await engines.until_empty(engine)

    first, second = script.calls
    assert second.at_s - first.at_s == pytest.approx(30.0 + 5.0)  # the timeout, the circuit's
    assert (first.message.delivery_attempt, second.message.delivery_attempt) == (1, 1)
    assert await history(engine, nid) == [(1, Outcome.UNAVAILABLE), (2, Outcome.DELIVERED)]
    row = await view(engine, nid)
    assert (row.state, row.failures) == (NotificationState.DELIVERED, 0)
    totals = engine.totals()
    assert (totals.held, totals.failed, totals.delivered) == (1, 0, 1)
    health = (await engine.circuit_states())["p"]
    assert (health.state, health.failures) == (CircuitState.CLOSED, 0)
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    log = await engine.store.notifications.deliveries(tenant_id, notification_id=nid)
    assert "did not answer in 30s" in min(log, key=lambda e: e.id).detail


async def test_stopping_waits_for_a_hung_send_only_so_long_and_gives_it_back(
    engines: VirtualEngines, script: Script
) -> None:
    settings = DispatcherSettings(stop_timeout_s=5.0, send_timeout_s=3600.0)
    engine = await engines.open(EngineSettings(dispatch=settings))
    script.answers.append(hang)
    [nid] = await setup(engine)
    await engine.start()
    await until(engines.clock, lambda: bool(script.calls), what="the send")

    stopping = engines.clock.monotonic()
    await engine.stop()
    assert engines.clock.monotonic() - stopping == pytest.approx(5.0)
    row = await view(engine, nid)
    # Given back unspent: the provider may have it (at least once), the notification is not
    # left leased until its lease expires.
    assert (row.state, row.attempt, row.failures) == (NotificationState.QUEUED, 1, 0)
    assert await history(engine, nid) == []


async def test_a_retry_that_falls_due_while_the_dispatcher_looks_is_not_left_for_the_poll(
    engines: VirtualEngines, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store answers each look 0.2 s late. The failed send is written back at once, due
    0.3 s later: the dispatcher counts it in from its own outcome (no look needed) and sends
    it when it falls due, not at the poll (60 s) nor after a late look."""
    retry = RetryPolicy(base_s=0.3, jitter=0.0)
    settings = DispatcherSettings(poll_s=60.0, retry=retry)
    engine = await engines.open(EngineSettings(dispatch=settings))
    script.answers.append(SendResult.transient("503"))
    await setup(engine)
    real_counts, real_pairs = engine.store.queue.queued_counts, engine.store.queue.due_pairs

    async def slow_counts(share: Share | None = None) -> dict[tuple[int, int], int]:
        found = await real_counts(share)
        await engines.clock.sleep(0.2)
        return found

    async def slow_pairs(
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]:
        found = await real_pairs(now, tenant_ids, pairs=pairs)
        await engines.clock.sleep(0.2)
        return found

    monkeypatch.setattr(engine.store.queue, "queued_counts", slow_counts)
    monkeypatch.setattr(engine.store.queue, "due_pairs", slow_pairs)
    await engine.start()
    await engines.until_empty(engine)

    first, second = script.calls
    assert second.at_s - first.at_s == pytest.approx(0.3, abs=0.01)  # when it fell due


async def test_a_slow_read_of_the_counts_does_not_hold_up_the_sends(
    engines: VirtualEngines, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store takes 2 s to read the counts (a second or two at 100,000 tenants): the
    notification the dispatcher knows of from its own enqueue is sent meanwhile, not after."""
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(poll_s=60.0)))
    await setup(engine)
    real_counts = engine.store.queue.queued_counts
    asked: list[float] = []

    async def slow_counts(share: Share | None = None) -> dict[tuple[int, int], int]:
        asked.append(engines.clock.monotonic())
        found = await real_counts(share)
        await engines.clock.sleep(2.0)
        return found

    monkeypatch.setattr(engine.store.queue, "queued_counts", slow_counts)
    started = engines.clock.monotonic()
    await engine.start()
    await engines.until_empty(engine)

    [call] = script.calls
    assert asked[0] - started < 0.1  # the first step asked for the counts
    assert call.at_s - started < 0.1  # and sent without waiting 2 s for them
