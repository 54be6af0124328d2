"""What the engine does with each answer a provider gives, and with a lease taken over.

A scripted provider answers each send as the test says, in order, and records every call;
real engines on real stores carry the answers out.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from engine import (
    BUILTIN_KINDS,
    BucketKey,
    DispatcherSettings,
    Engine,
    EngineSettings,
    Limit,
    LocalLimiter,
    Message,
    NotificationState,
    NotificationView,
    Outcome,
    Provider,
    ProviderConfig,
    RetryPolicy,
    SendResult,
    Store,
    SystemClock,
)

Answer = SendResult | Callable[[Message], Awaitable[SendResult]]


@dataclass(frozen=True)
class Call:
    at_s: float  # time.monotonic() when the send began
    message: Message


@dataclass
class Script:
    """Shared by every provider a test's engines build: answers in order, then delivered."""

    answers: deque[Answer] = field(default_factory=deque)
    calls: list[Call] = field(default_factory=list)

    def provider(self, config: ProviderConfig) -> Provider:
        return ScriptedProvider(config.name, self)


class ScriptedProvider:
    def __init__(self, name: str, script: Script) -> None:
        self.name = name
        self.script = script

    async def send(self, message: Message) -> SendResult:
        self.script.calls.append(Call(time.monotonic(), message))
        answer = self.script.answers.popleft() if self.script.answers else SendResult.delivered()
        return answer if isinstance(answer, SendResult) else await answer(message)

    async def aclose(self) -> None:
        """Nothing to release."""


Build = Callable[[EngineSettings], Awaitable[Engine]]


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
async def build(store: Store, script: Script) -> AsyncIterator[Build]:
    """Opens engines with full settings and the 'scripted' kind; closes them all at the end."""
    engines: list[Engine] = []
    factories = {**BUILTIN_KINDS, "scripted": script.provider}

    async def make(settings: EngineSettings) -> Engine:
        engine = Engine(store, LocalLimiter(SystemClock()), factories, settings=settings)
        await engine.open()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s"
        await asyncio.sleep(0.01)


async def setup(engine: Engine, n: int = 1) -> list[int]:
    """Tenant 'acme', provider 'p' (scripted), ``n`` notifications keyed k0, k1, ..."""
    await engine.add_tenant("acme")
    await engine.add_provider("p", "scripted")
    return [
        (await engine.enqueue("acme", "p", f"user{i}@example.com", key=f"k{i}")).id
        for i in range(n)
    ]


async def view(engine: Engine, notification_id: int) -> NotificationView:
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    found = await engine.store.queue.get(tenant_id, notification_id)
    assert found is not None
    return found


async def history(engine: Engine, notification_id: int) -> list[tuple[int, Outcome]]:
    """(attempt, outcome) of every delivery-log row of one notification, oldest first."""
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    rows = await engine.store.queue.deliveries(tenant_id, notification_id=notification_id)
    return [(row.attempt, row.outcome) for row in sorted(rows, key=lambda r: r.id)]


# -- fencing ------------------------------------------------------------------------------


async def test_a_worker_whose_lease_was_taken_over_cannot_complete(
    build: Build, script: Script
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(message: Message) -> SendResult:
        entered.set()
        await release.wait()
        return SendResult.delivered("too late")

    script.answers.append(held)
    # The first engine never renews (heartbeat) or reaps on its own within the test.
    first = await build(
        EngineSettings(
            dispatch=DispatcherSettings(concurrency=1, lease_s=0.3), heartbeat_s=60, reap_s=60
        )
    )
    [nid] = await setup(first)
    await first.start()
    await asyncio.wait_for(entered.wait(), 10)

    second = await build(EngineSettings(dispatch=DispatcherSettings(concurrency=2), reap_s=0.05))
    await second.start()

    async def delivered() -> bool:
        return (await view(second, nid)).state is NotificationState.DELIVERED

    await eventually(delivered)
    release.set()

    async def refused() -> bool:
        return first.telemetry.totals().takeovers == 1

    await eventually(refused)
    row = await view(first, nid)
    assert (row.state, row.attempt, row.failures) == (NotificationState.DELIVERED, 2, 0)
    tenant_id = first.directory.tenant_id("acme")
    assert tenant_id is not None
    log = await first.store.queue.deliveries(tenant_id, notification_id=nid)
    assert [(e.outcome, e.attempt, e.worker) for e in log] == [
        (Outcome.DELIVERED, 2, second.worker_id)
    ]
    assert [(c.message.attempt, c.message.idempotency_key) for c in script.calls] == [
        (1, "k0"),
        (2, "k0"),
    ]
    assert first.telemetry.totals().delivered == 0
    assert second.telemetry.totals().delivered == 1
    assert second.telemetry.totals().reaped == 1


# -- outcomes -----------------------------------------------------------------------------


async def test_throttled_requeues_without_spending_an_attempt_and_holds_the_provider(
    build: Build, script: Script
) -> None:
    retry_after_s = 0.4
    script.answers.append(SendResult.throttled(retry_after_s, "429 slow down"))
    engine = await build(EngineSettings(dispatch=DispatcherSettings(concurrency=1)))
    first, second = await setup(engine, 2)
    await engine.update_provider("p", limit=Limit(1000.0, 100.0))
    await engine.start()

    async def one_call() -> bool:
        return len(script.calls) >= 1

    await eventually(one_call)
    await asyncio.sleep(0.05)  # the throttle is applied as the send returns
    [level] = [b for b in await engine.limiter.levels() if b.key == BucketKey.for_provider("p")]
    assert level.blocked_for_s > 0.2
    assert level.tokens == 0.0
    assert await engine.run_until_empty(timeout_s=10)

    thrown = script.calls[0]
    assert thrown.message.notification_id == first
    # Nothing went to the provider while it was held, not even the other notification;
    # both went soon after.
    waited_s = [c.at_s - thrown.at_s for c in script.calls[1:]]
    assert len(waited_s) == 2
    assert all(retry_after_s <= w < retry_after_s + 0.4 for w in waited_s), waited_s
    row = await view(engine, first)
    assert (row.state, row.attempt, row.failures) == (NotificationState.DELIVERED, 2, 0)
    assert await history(engine, first) == [(1, Outcome.THROTTLED), (2, Outcome.DELIVERED)]
    assert (await view(engine, second)).state is NotificationState.DELIVERED
    totals = engine.telemetry.totals()
    assert (totals.throttled, totals.failed, totals.dead, totals.delivered) == (1, 0, 0, 2)


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
    build: Build,
    script: Script,
    answers: list[SendResult],
    state: NotificationState,
    failures: int,
    calls: int,
    retried: int,
) -> None:
    base_s = 0.05
    retry = RetryPolicy(base_s=base_s, jitter=0.0)
    engine = await build(
        # A poll far longer than any backoff: a retry that came only with the next poll
        # would show as a gap of seconds, whatever the load on the machine.
        EngineSettings(
            dispatch=DispatcherSettings(concurrency=4, retry=retry, poll_s=5.0), max_attempts=3
        )
    )
    script.answers.extend(answers)
    [nid] = await setup(engine)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=10)

    assert [c.message.attempt for c in script.calls] == list(range(1, calls + 1))
    assert {c.message.idempotency_key for c in script.calls} == {"k0"}
    gaps_s = [b.at_s - a.at_s for a, b in zip(script.calls, script.calls[1:], strict=False)]
    for n, gap_s in enumerate(gaps_s, start=1):
        backoff_s = base_s * 2 ** (n - 1)  # after the n-th failure
        # Not before its backoff, and not left waiting for the next poll (5 s) either.
        assert backoff_s <= gap_s < backoff_s + 2.5, f"retry {n} came after {gap_s:.3f}s"
    row = await view(engine, nid)
    assert (row.state, row.failures) == (state, failures)
    if state is NotificationState.DEAD:
        assert row.last_error == answers[-1].detail
        assert row.finished_at is not None
    outcomes = [answer.outcome for answer in answers][:calls]
    if state is NotificationState.DELIVERED:
        outcomes.append(Outcome.DELIVERED)
    assert await history(engine, nid) == list(enumerate(outcomes, start=1))
    totals = engine.telemetry.totals()
    dead = int(state is NotificationState.DEAD)
    assert (totals.delivered, totals.dead, totals.failed) == (1 - dead, dead, retried)


async def test_a_dead_notification_retried_gets_a_fresh_budget_and_is_delivered(
    build: Build, script: Script
) -> None:
    retry = RetryPolicy(base_s=0.01, jitter=0.0)
    engine = await build(EngineSettings(dispatch=DispatcherSettings(retry=retry), max_attempts=2))
    script.answers.extend([TRANSIENT, TRANSIENT])
    [nid] = await setup(engine)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=10)
    assert [(name, row.id) for name, row in await engine.dead()] == [("acme", nid)]

    assert await engine.retry_dead([nid], tenant="acme") == 1
    assert await engine.run_until_empty(timeout_s=10)
    row = await view(engine, nid)
    assert (row.state, row.failures, row.attempt) == (NotificationState.DELIVERED, 0, 3)
    assert await engine.dead() == []
    assert await history(engine, nid) == [
        (1, Outcome.TRANSIENT),
        (2, Outcome.TRANSIENT),
        (3, Outcome.DELIVERED),
    ]
