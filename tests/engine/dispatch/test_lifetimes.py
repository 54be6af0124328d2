"""A notification's useful life (issue 47): a send time (``scheduled`` until then), a deadline
(``expired`` past it, never sent), and where the deadline is decided: at the claim, just before
the provider call, when a retry would come after it, and by the sweep of rows nobody claims.

Every test runs on SQLite and on Postgres (``store`` is parametrized in tests/conftest.py) and
on virtual time (testkit/virtual_time.py): the engine's clock decides every time here.
"""

from __future__ import annotations

import pytest

from engine import (
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    FakeClock,
    ItemRefused,
    Limit,
    Message,
    NotCancellable,
    NotificationState,
    Outcome,
    RetryPolicy,
    SendResult,
)
from engine.facade import notifications as notifications_part
from testkit.scripted import Script, history, view
from testkit.virtual_time import VirtualEngines, until

QUEUED = NotificationState.QUEUED
SCHEDULED = NotificationState.SCHEDULED
LEASED = NotificationState.LEASED
DELIVERED = NotificationState.DELIVERED
EXPIRED = NotificationState.EXPIRED
CANCELLED = NotificationState.CANCELLED


async def _acme(engine: Engine) -> None:
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")


async def _state(engine: Engine, nid: int) -> NotificationState:
    return (await view(engine, nid)).state


# -- send at a time ------------------------------------------------------------------------------


async def test_a_scheduled_notification_waits_for_its_time_then_leaves_within_a_second(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    send_at = clock.wall() + 30
    later = await engine.enqueue("acme", "p", "a@example.com", send_at=send_at)
    now = await engine.enqueue("acme", "p", "b@example.com")
    assert (later.send_at, later.expires_at) == (send_at, None)
    assert now.send_at is None
    assert await _state(engine, later.id) is SCHEDULED
    depth = {r.state: r.count for r in await engine.store.notifications.depth()}
    assert depth.get(SCHEDULED) == 1 and depth.get(QUEUED) == 1  # not counted as queued

    await engine.start()
    await until(clock, lambda: len(script.calls) == 1, what="the due one sent")
    assert script.calls[0].message.notification_id == now.id
    started = clock.monotonic()
    await until(clock, lambda: len(script.calls) == 2, within_s=60, what="the scheduled one")
    sent_at_wall = script.calls[1].at_s + (clock.wall() - clock.monotonic())
    assert script.calls[1].message.notification_id == later.id
    assert send_at <= sent_at_wall < send_at + 1.0  # within a second of its time
    assert clock.monotonic() - started > 20  # not before
    await engines.until_empty(engine)
    assert await _state(engine, later.id) is DELIVERED


async def test_a_send_time_in_the_past_sends_now(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    result = await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() - 3600)
    assert result.send_at is None
    assert await _state(engine, result.id) is QUEUED
    await engine.start()
    await engines.until_empty(engine)
    assert await _state(engine, result.id) is DELIVERED


async def test_a_scheduled_notification_is_cancelled_and_a_claim_never_sees_it(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    result = await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() + 5)
    cancelled = await engine.notification_cancel("acme", result.id)
    assert cancelled.state is CANCELLED
    clock.advance(10)
    promoted = await engine.store.lifetimes.promote(clock.wall())
    assert promoted.total == 0  # a cancelled row is never promoted
    await engine.start()
    await clock.sleep(10)  # many rounds and sweeps
    assert script.calls == []


async def test_a_cancel_that_loses_to_the_claim_of_a_promoted_row_says_so(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    result = await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() + 5)
    clock.advance(5)
    promoted = await engine.store.lifetimes.promote(clock.wall())
    tenant_id, provider_id = engine.directory.tenant_id("acme"), engine.directory.provider_id("p")
    assert tenant_id is not None and provider_id is not None
    assert promoted.due == {(tenant_id, provider_id): 1}
    leased = await engine.store.queue.claim(
        tenant_id, provider_id, 5, owner="w", lease_s=30, now=clock.wall()
    )
    assert [item.id for item in leased] == [result.id]
    with pytest.raises(NotCancellable) as refused:
        await engine.notification_cancel("acme", result.id)
    assert refused.value.state is LEASED


# -- deadlines -----------------------------------------------------------------------------------


async def test_a_claim_past_the_deadline_leases_nothing_and_ends_it_expired(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    late = await engine.enqueue("acme", "p", "a@example.com", ttl_s=5)
    fresh = await engine.enqueue("acme", "p", "b@example.com", ttl_s=60)
    assert late.expires_at == clock.wall() + 5
    clock.advance(6)
    tenant_id, provider_id = engine.directory.tenant_id("acme"), engine.directory.provider_id("p")
    assert tenant_id is not None and provider_id is not None
    leased = await engine.store.queue.claim(
        tenant_id, provider_id, 5, owner="w", lease_s=30, now=clock.wall()
    )
    assert [item.id for item in leased] == [fresh.id]
    assert leased[0].expires_at == fresh.expires_at
    row = await view(engine, late.id)
    assert row.state is EXPIRED and row.finished_at == clock.wall()
    assert row.last_error is not None and "deadline" in row.last_error
    many = await engine.store.queue.claim_many(
        [(tenant_id, provider_id, 5)], owner="w", lease_s=30, now=clock.wall()
    )
    assert many == [[]]


async def test_a_notification_past_its_deadline_after_waiting_for_a_sender_is_not_sent(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=1, batch=1))
    engine = await engines.open(settings)
    await _acme(engine)

    async def slow(message: Message) -> SendResult:
        await clock.sleep(10)
        return SendResult.delivered()

    script.answers.append(slow)
    first = await engine.enqueue("acme", "p", "a@example.com", priority=1)
    second = await engine.enqueue("acme", "p", "b@example.com", ttl_s=5)
    await engine.start()
    await engines.until_empty(engine)
    assert [c.message.notification_id for c in script.calls] == [first.id]
    assert await _state(engine, second.id) is EXPIRED
    assert [outcome for _, outcome in await history(engine, second.id)] == [Outcome.EXPIRED]
    assert engine.telemetry.totals().expired == 1


async def test_a_retry_that_would_come_after_the_deadline_expires_at_once(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    retry = RetryPolicy(base_s=30, jitter=0)
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(retry=retry)))
    await _acme(engine)
    script.answers.append(SendResult.transient("try later"))
    result = await engine.enqueue("acme", "p", "a@example.com", ttl_s=20)
    await engine.start()
    await until(clock, lambda: len(script.calls) == 1, what="the first try")
    await until(clock, lambda: engine.telemetry.totals().expired == 1, what="the expiry")
    row = await view(engine, result.id)
    assert row.state is EXPIRED
    assert row.last_error is not None and "next try would come after its deadline" in row.last_error
    assert [outcome for _, outcome in await history(engine, result.id)] == [Outcome.TRANSIENT]
    assert len(script.calls) == 1


async def test_the_providers_answer_that_it_expired_ends_it_expired(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    script.answers.append(SendResult.expired("30036: validity period expired"))
    result = await engine.enqueue("acme", "p", "a@example.com", ttl_s=60)
    await engine.start()
    await engines.until_empty(engine)
    assert await _state(engine, result.id) is EXPIRED
    assert engine.dispatcher.circuits.is_closed(engine.directory.provider_id("p") or 0)


async def test_rows_nobody_claims_expire_within_seconds_of_their_deadline(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    await engine.tenant_update("acme", enabled=False)  # paused: nobody claims its rows
    rows = [await engine.enqueue("acme", "p", f"u{i}@example.com", ttl_s=10) for i in range(3)]
    scheduled = await engine.enqueue(
        "acme", "p", "s@example.com", send_at=clock.wall() + 20, ttl_s=5
    )
    deadline = clock.wall() + 10
    await engine.start()

    async def all_expired() -> bool:
        return all([await _state(engine, r.id) is EXPIRED for r in rows])

    await until(clock, all_expired, within_s=30, step_s=0.1, what="the sweep")
    assert deadline <= clock.wall() < deadline + 2
    send_at = scheduled.send_at
    assert send_at is not None
    await until(clock, lambda: clock.wall() > send_at + 6, within_s=40)
    await until(clock, lambda: engine.telemetry.totals().expired >= 4, within_s=5)
    assert await _state(engine, scheduled.id) is EXPIRED  # promoted past its deadline
    assert script.calls == []


async def test_a_provider_is_told_what_is_left_of_the_deadline(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    with_deadline = await engine.enqueue("acme", "p", "a@example.com", ttl_s=90)
    without = await engine.enqueue("acme", "p", "b@example.com")
    await engine.start()
    await engines.until_empty(engine)
    sent = {c.message.notification_id: c.message for c in script.calls}
    assert sent[with_deadline.id].expires_at == with_deadline.expires_at
    ttl_s = sent[with_deadline.id].ttl_s
    assert ttl_s is not None and 85 < ttl_s <= 90
    assert (sent[without.id].expires_at, sent[without.id].ttl_s) == (None, None)


# -- defaults and refusals -----------------------------------------------------------------------


async def test_a_tenants_default_deadline_comes_before_its_providers(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted", options={"default_ttl_s": "300"})
    through_provider = await engine.enqueue("acme", "p", "a@example.com")
    assert through_provider.expires_at == clock.wall() + 300
    await engine.tenant_update("acme", default_ttl_s=60)
    through_tenant = await engine.enqueue("acme", "p", "b@example.com")
    assert through_tenant.expires_at == clock.wall() + 60
    own = await engine.enqueue("acme", "p", "c@example.com", ttl_s=5)
    assert own.expires_at == clock.wall() + 5
    at = clock.wall() + 100
    scheduled = await engine.enqueue("acme", "p", "d@example.com", send_at=at)
    assert scheduled.expires_at == at + 60  # counted from the send time


@pytest.mark.parametrize(
    ("item", "field", "said"),
    [
        (EnqueueItem("p", "x@example.com", {}, send_at=1e12), "send_at", "35 days"),
        (EnqueueItem("p", "x@example.com", {}, expires_at=1.0), "expires_at", "passed"),
        (EnqueueItem("p", "x@example.com", {}, ttl_s=-1), "ttl_s", "above 0"),
        (EnqueueItem("p", "x@example.com", {}, expires_at=2e9, ttl_s=5), "ttl_s", "not both"),
    ],
)
async def test_a_bad_time_is_refused_by_index_and_field_with_nothing_written(
    engines: VirtualEngines,
    clock: FakeClock,
    item: EnqueueItem,
    field: str,
    said: str,
) -> None:
    engine = await engines.open()
    await _acme(engine)
    good = EnqueueItem("p", "ok@example.com", {})
    with pytest.raises(ItemRefused) as refused:
        await engine.enqueue_many("acme", [good, item])
    assert (refused.value.index, refused.value.field) == (1, field)
    assert said in refused.value.reason
    assert await engine.store.notifications.depth() == []


async def test_a_deadline_before_the_send_time_is_refused(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    at = clock.wall() + 60
    item = EnqueueItem("p", "x@example.com", {}, send_at=at, expires_at=at)
    with pytest.raises(ItemRefused, match="must come after the send time"):
        await engine.enqueue_many("acme", [item])


async def test_a_repeated_key_returns_the_scheduled_notification(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    at = clock.wall() + 60
    first = await engine.enqueue("acme", "p", "a@example.com", key="k", send_at=at)
    again = await engine.enqueue("acme", "p", "a@example.com", key="k", send_at=at)
    assert again.duplicate and again.id == first.id
    assert await _state(engine, first.id) is SCHEDULED


async def test_scheduled_rows_stay_out_of_the_dispatchers_book(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(poll_s=0.5)))
    await _acme(engine)
    await engine.tenant_update("acme", limit=Limit(100, 100))
    at = clock.wall() + 3600
    items = [EnqueueItem("p", f"u{i}@example.com", {}, send_at=at) for i in range(200)]
    await engine.enqueue_many("acme", items)
    await engine.start()
    await until(clock, lambda: clock.wall() > at - 3000, within_s=700, step_s=5)
    assert engine.dispatcher._book.due == {}
    assert engine.telemetry.totals().claims == 0
    assert script.calls == []


async def test_rows_due_soon_are_queued_ahead_but_claimed_only_from_their_time(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    at = clock.wall() + 3
    result = await engine.enqueue("acme", "p", "a@example.com", send_at=at)
    far = await engine.enqueue("acme", "p", "b@example.com", send_at=at + 60)
    promoted = await engine.store.lifetimes.promote(clock.wall(), ahead_s=5)
    tenant_id, provider_id = engine.directory.tenant_id("acme"), engine.directory.provider_id("p")
    assert tenant_id is not None and provider_id is not None
    assert (promoted.due, promoted.later, promoted.ahead) == ({}, {(tenant_id, provider_id): at}, 1)
    assert await _state(engine, result.id) is QUEUED
    assert await _state(engine, far.id) is SCHEDULED
    early = await engine.store.queue.claim(
        tenant_id, provider_id, 5, owner="w", lease_s=30, now=clock.wall()
    )
    assert early == []  # queued, not yet claimable
    clock.advance(3)
    on_time = await engine.store.queue.claim(
        tenant_id, provider_id, 5, owner="w", lease_s=30, now=clock.wall()
    )
    assert [item.id for item in on_time] == [result.id]


async def test_a_deadline_soon_does_not_make_the_sweep_spin(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    """A queued row whose deadline is near: the sweep waits for it, it is not run over and
    over meanwhile (as when scheduled rows' lead was taken off deadlines too)."""
    engine = await engines.open()
    await _acme(engine)
    await engine.tenant_update("acme", enabled=False)
    row = await engine.enqueue("acme", "p", "a@example.com", ttl_s=1.5)
    calls = 0
    sweep = engine.store.lifetimes.expire

    async def counted(now: float, *, limit: int = 5000) -> int:
        nonlocal calls
        calls += 1
        return await sweep(now, limit=limit)

    engine.store.lifetimes.expire = counted  # type: ignore[method-assign]
    await engine.start()
    await clock.sleep(5)
    assert await _state(engine, row.id) is EXPIRED
    assert calls <= 12  # about one sweep per half second, not one per wake-up


async def test_how_late_scheduled_sends_were_is_in_the_snapshot(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    await engine.tenant_update("acme", limit=Limit(2, 1))
    at = clock.wall() + 10
    items = [EnqueueItem("p", f"u{i}@example.com", {}, send_at=at) for i in range(4)]
    await engine.enqueue_many("acme", items)
    await engine.enqueue("acme", "p", "now@example.com")  # not scheduled: not counted
    await engine.start()
    await until(clock, lambda: len(script.calls) == 5, within_s=30, what="every send")
    await engines.until_empty(engine)
    snap = await engine.snapshot()
    assert snap.lateness_p50_s is not None and snap.lateness_p99_s is not None
    # The bucket (2/s, burst 1) lets one go at once, then one each half second.
    assert snap.lateness_p50_s <= 1.0
    assert 1.0 <= snap.lateness_p99_s <= 2.0


async def test_the_scheduled_notifications_of_every_tenant_are_listed_soonest_first(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _acme(engine)
    await engine.tenant_add("beta")
    later = await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() + 60)
    sooner = await engine.enqueue("beta", "p", "b@example.com", send_at=clock.wall() + 30)
    await engine.enqueue("acme", "p", "now@example.com")
    listed = await engine.notifications_newest(SCHEDULED, limit=10)
    assert {v.id for v in listed} == {later.id, sooner.id}
    assert all(v.state is SCHEDULED for v in listed)
    assert {v.recipient_masked for v in listed}.isdisjoint({"a@example.com", "b@example.com"})
    everything = await engine.notifications_newest(None, limit=10)
    assert {later.id, sooner.id} <= {v.id for v in everything}


async def test_many_rows_due_together_are_queued_as_far_ahead_as_their_promotion_takes(
    engines: VirtualEngines, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows due in one second are counted once it comes within a minute, and the sweep starts
    early enough to queue them all at the promotions' rate (here taken as 100 rows/s: 1,000
    rows, 15 s ahead); a few rows keep ``sweep_ahead_s`` (2 s). Queued early, each is still
    claimable only from its time."""
    monkeypatch.setattr(notifications_part, "_FIRST_PER_S", 100.0)
    engine = await engines.open()
    await _acme(engine)
    at = clock.wall() + 40
    items = [EnqueueItem("p", f"u{i}@example.com", {}, send_at=at) for i in range(1000)]
    await engine.enqueue_many("acme", items)
    few = await engine.enqueue("acme", "p", "late@example.com", send_at=at + 120)
    await engine.tenant_update("acme", enabled=False)  # nothing is sent: the states are read
    await engine.start()
    await clock.sleep(40 - 15 - 1)
    assert await _scheduled(engine) == 1001
    await clock.sleep(2)
    assert await _scheduled(engine) == 1  # 1,000 queued 14 s ahead
    assert await _state(engine, few.id) is SCHEDULED
    await clock.sleep(120 - 2 - 1 + 14)  # the single one: queued 2 s ahead, not 15
    assert await _state(engine, few.id) is SCHEDULED
    await clock.sleep(1.5)
    assert await _state(engine, few.id) is QUEUED


async def _scheduled(engine: Engine) -> int:
    return sum(r.count for r in await engine.store.notifications.depth() if r.state is SCHEDULED)
