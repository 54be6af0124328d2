"""What the engine does with each answer a provider gives, and with a lease taken over.

A scripted provider answers each send as the test says, in order, and records every call;
real engines on real stores carry the answers out, on virtual time (testkit/virtual_time.py):
back-offs and leases of seconds pass in no time, and each gap is what the policy says.
"""

from __future__ import annotations

import asyncio

import pytest

from engine import (
    BucketKey,
    DispatcherSettings,
    EngineSettings,
    EnqueueItem,
    FakeClock,
    Limit,
    Message,
    NotificationState,
    Outcome,
    RetryPolicy,
    SendResult,
)
from testkit.scripted import Script, history, setup, view
from testkit.virtual_time import VirtualEngines, until

# -- fencing ------------------------------------------------------------------------------


async def test_a_worker_whose_lease_was_taken_over_cannot_complete(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(message: Message) -> SendResult:
        entered.set()
        await release.wait()
        return SendResult.delivered("too late")

    script.answers.append(held)
    # The first engine never renews (heartbeat) or reaps on its own within the test, and its
    # held send does not time out.
    first = await engines.open(
        EngineSettings(
            dispatch=DispatcherSettings(concurrency=1, lease_s=0.3, send_timeout_s=3600),
            heartbeat_s=600,
            reap_s=600,
        )
    )
    [nid] = await setup(first)
    await first.start()
    await until(clock, entered.is_set, what="first send")

    second = await engines.open(
        EngineSettings(dispatch=DispatcherSettings(concurrency=2), reap_s=0.05)
    )
    await second.start()

    async def delivered() -> bool:
        return (await view(second, nid)).state is NotificationState.DELIVERED

    taken_s = await until(clock, delivered, what="delivery by the second engine")
    assert taken_s >= 0.3, "taken over before the lease expired"
    release.set()
    await until(clock, lambda: first.totals().takeovers == 1, what="refused completion")
    row = await view(first, nid)
    assert (row.state, row.attempt, row.failures) == (NotificationState.DELIVERED, 2, 0)
    tenant_id = first.directory.tenant_id("acme")
    assert tenant_id is not None
    log = await first.store.notifications.deliveries(tenant_id, notification_id=nid)
    assert [(e.outcome, e.attempt, e.worker) for e in log] == [
        (Outcome.DELIVERED, 2, second.worker_id)
    ]
    assert [(c.message.attempt, c.message.idempotency_key) for c in script.calls] == [
        (1, "k0"),
        (2, "k0"),
    ]
    assert first.totals().delivered == 0
    assert second.totals().delivered == 1
    assert second.totals().reaped == 1


# -- outcomes -----------------------------------------------------------------------------


async def test_throttled_requeues_without_spending_an_attempt_and_holds_the_provider(
    engines: VirtualEngines, script: Script
) -> None:
    retry_after_s = 0.4
    script.answers.append(SendResult.throttled(retry_after_s, "429 slow down"))
    engine = await engines.open(EngineSettings(dispatch=DispatcherSettings(concurrency=1)))
    first, second = await setup(engine, 2)
    await engine.provider_update("p", limit=Limit(1000.0, 100.0))
    await engine.start()

    await until(engines.clock, lambda: len(script.calls) >= 1, what="first call")
    # The throttle is applied as the send returns, at the same virtual instant.
    [level] = [b for b in await engine.limiter.levels() if b.key == BucketKey.for_provider("p")]
    assert level.blocked_for_s == pytest.approx(retry_after_s, abs=0.011)  # until's step
    assert level.tokens == 0.0
    await engines.until_empty(engine)

    thrown = script.calls[0]
    assert thrown.message.notification_id == first
    # Nothing went to the provider while it was held, not even the other notification;
    # both went as the hold ended (1e-6: wall-clock seconds are floats near 1.7e9).
    waited_s = [c.at_s - thrown.at_s for c in script.calls[1:]]
    assert len(waited_s) == 2
    assert all(retry_after_s - 1e-6 <= w < retry_after_s + 0.01 for w in waited_s), waited_s
    row = await view(engine, first)
    assert (row.state, row.attempt, row.failures) == (NotificationState.DELIVERED, 2, 0)
    assert await history(engine, first) == [(1, Outcome.THROTTLED), (2, Outcome.DELIVERED)]
    assert (await view(engine, second)).state is NotificationState.DELIVERED
    totals = engine.totals()
    assert (totals.throttled, totals.failed, totals.dead, totals.delivered) == (1, 0, 0, 2)


async def test_leases_given_back_by_a_throttle_go_out_when_it_ends_not_at_the_next_poll(
    engines: VirtualEngines, script: Script
) -> None:
    # One sender, leases taken ahead: acme's send is throttled, and the throttle gives back
    # bravo's two leases waiting for a sender, after the book counted them out. They are
    # counted back in and go as the hold ends; the poll (ten minutes here, an hour in a
    # plan) is not what finds them again.
    retry_after_s = 0.4
    script.answers.append(SendResult.throttled(retry_after_s, "429 slow down"))
    settings = DispatcherSettings(concurrency=1, poll_s=600.0)
    engine = await engines.open(EngineSettings(dispatch=settings))
    await setup(engine, 1)
    await engine.tenant_add("bravo")
    await engine.enqueue_many(
        "bravo", [EnqueueItem("p", f"b{i}@example.com", {}, None, 0) for i in (1, 2)]
    )
    await engine.start()
    took_s = await engines.until_empty(engine, within_s=60.0)
    assert len(script.calls) == 4
    assert took_s < retry_after_s + 1.0, took_s


TRANSIENT = SendResult.transient("503 try later")
PERMANENT = SendResult.permanent("550 no such mailbox")

# With max_attempts 3: the answers given, then the final state, the failures counted, the
# calls made, and how many of those were retried.
OUTCOMES = [
    pytest.param([TRANSIENT], NotificationState.DELIVERED, 1, 2, 1, id="transient-once"),
    pytest.param([TRANSIENT] * 2, NotificationState.DELIVERED, 2, 3, 2, id="transient-twice"),
    pytest.param([TRANSIENT] * 3, NotificationState.DEAD, 3, 3, 2, id="transient-until-dead"),
    pytest.param([PERMANENT], NotificationState.DEAD, 0, 1, 0, id="permanent-dead-at-once"),
]


@pytest.mark.parametrize(("answers", "state", "failures", "calls", "retried"), OUTCOMES)
async def test_failures_retry_with_backoff_up_to_max_attempts(
    engines: VirtualEngines,
    script: Script,
    answers: list[SendResult],
    state: NotificationState,
    failures: int,
    calls: int,
    retried: int,
) -> None:
    base_s = 1.0
    retry = RetryPolicy(base_s=base_s, jitter=0.0)
    engine = await engines.open(
        # A poll far longer than any backoff: a retry that came only with the next poll
        # would show as a gap of a minute.
        EngineSettings(
            dispatch=DispatcherSettings(concurrency=4, retry=retry, poll_s=60.0), max_attempts=3
        )
    )
    script.answers.extend(answers)
    [nid] = await setup(engine)
    await engine.start()
    await engines.until_empty(engine)

    assert [c.message.attempt for c in script.calls] == list(range(1, calls + 1))
    assert {c.message.idempotency_key for c in script.calls} == {"k0"}
    gaps_s = [b.at_s - a.at_s for a, b in zip(script.calls, script.calls[1:], strict=False)]
    for n, gap_s in enumerate(gaps_s, start=1):
        backoff_s = base_s * 2 ** (n - 1)  # after the n-th failure
        # Not before its backoff, and not left waiting for the next poll either.
        assert backoff_s - 1e-6 <= gap_s < backoff_s + 0.01, f"retry {n} came after {gap_s}s"
    row = await view(engine, nid)
    assert (row.state, row.failures) == (state, failures)
    if state is NotificationState.DEAD:
        assert row.last_error == answers[-1].detail
        assert row.finished_at is not None
    outcomes = [answer.outcome for answer in answers][:calls]
    if state is NotificationState.DELIVERED:
        outcomes.append(Outcome.DELIVERED)
    assert await history(engine, nid) == list(enumerate(outcomes, start=1))
    totals = engine.totals()
    dead = int(state is NotificationState.DEAD)
    assert (totals.delivered, totals.dead, totals.failed) == (1 - dead, dead, retried)


async def test_a_dead_notification_retried_gets_a_fresh_budget_and_is_delivered(
    engines: VirtualEngines, script: Script
) -> None:
    # The default backoff: 0.5 s to 1 s.
    engine = await engines.open(EngineSettings(max_attempts=2))
    script.answers.extend([TRANSIENT, TRANSIENT])
    [nid] = await setup(engine)
    await engine.start()
    await engines.until_empty(engine)
    assert [(name, row.id) for name, row in await engine.dead()] == [("acme", nid)]

    assert await engine.dead_retry([nid], tenant="acme") == 1
    await engines.until_empty(engine)
    row = await view(engine, nid)
    assert (row.state, row.failures, row.attempt) == (NotificationState.DELIVERED, 0, 3)
    assert await engine.dead() == []
    assert await history(engine, nid) == [
        (1, Outcome.TRANSIENT),
        (2, Outcome.TRANSIENT),
        (3, Outcome.DELIVERED),
    ]
