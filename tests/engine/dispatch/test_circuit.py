"""The circuit breaker in the dispatcher, on virtual time with a scripted provider (real stores:
SQLite and Postgres): it opens after the threshold, spends no attempt, leases nothing while
open, sends one probe after the back-off, closes on an answer and opens again for twice as
long on a failure; message-level failures never open it; engines on one store share it."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from engine import (
    CircuitState,
    DispatcherSettings,
    Engine,
    EngineSettings,
    FakeClock,
    Message,
    NotFound,
    NotificationState,
    NotificationView,
    Outcome,
    RetryPolicy,
    SendResult,
)
from testkit.scripted import Script, history, setup, view
from testkit.virtual_time import VirtualEngines, until

DOWN = SendResult.unavailable("ConnectionRefusedError: [Errno 111] Connect call failed")
OPEN, CLOSED, HALF = CircuitState.OPEN, CircuitState.CLOSED, CircuitState.HALF_OPEN
BACKOFF_S = 5.0  # the default circuit_backoff_s
SETTLE_S = 0.6  # slack for a store round trip and a poll on virtual time


def one_at_a_time(**dispatch: object) -> EngineSettings:
    return EngineSettings(dispatch=DispatcherSettings(concurrency=1, **dispatch))  # type: ignore[arg-type]


def state(engine: Engine) -> CircuitState:
    pid = engine.directory.provider_id("p")
    assert pid is not None
    return engine.dispatcher.circuits.health(pid).state


async def rows(engine: Engine, ids: list[int]) -> list[NotificationView]:
    return [await view(engine, nid) for nid in ids]


def gaps(script: Script) -> list[float]:
    at = [c.at_s for c in script.calls]
    return [b - a for a, b in itertools.pairwise(at)]


async def test_it_opens_after_three_spends_nothing_and_one_probe_closes_it(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([DOWN] * 3)
    engine = await engines.open(one_at_a_time())
    ids = await setup(engine, 5)
    await engine.start()

    await until(clock, lambda: state(engine) is OPEN, what="an open circuit")
    snap = await engine.snapshot()
    [shown] = snap.health
    assert (shown.provider, shown.state, shown.failures) == ("p", OPEN, 3)
    assert shown.last_error == DOWN.detail
    assert shown.since is not None and shown.next_probe_at == shown.since + BACKOFF_S
    assert (await engine.circuit_states())["p"] == shown

    await engines.until_empty(engine)
    # Three failures, then nothing until the probe after the back-off, then the rest at once.
    assert len(script.calls) == 3 + len(ids)
    assert BACKOFF_S - 1e-6 <= gaps(script)[2] < BACKOFF_S + SETTLE_S, gaps(script)
    assert max(gaps(script)[3:]) < SETTLE_S
    for nid in ids:
        row = await view(engine, nid)
        assert (row.state, row.failures) == (NotificationState.DELIVERED, 0)
    assert await history(engine, ids[0]) == [(1, Outcome.UNAVAILABLE), (2, Outcome.DELIVERED)]
    health = (await engine.circuit_states())["p"]
    assert (health.state, health.failures, health.next_probe_at) == (CLOSED, 0, None)
    assert health.last_error == DOWN.detail  # what the last outage was
    assert engine.totals().dead == 0


async def test_a_failed_probe_opens_it_again_for_twice_as_long(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([DOWN] * 5)  # three to open it, then two probes fail
    engine = await engines.open(one_at_a_time())
    ids = await setup(engine, 3)
    await engine.start()
    await engines.until_empty(engine)

    probes = gaps(script)[2:5]
    for waited_s, backoff_s in zip(probes, (5.0, 10.0, 20.0), strict=True):
        assert backoff_s - 1e-6 <= waited_s < backoff_s + SETTLE_S, probes
    assert len(script.calls) == 5 + len(ids)
    assert all(row.failures == 0 for row in await rows(engine, ids))
    assert (await engine.circuit_states())["p"].state is CLOSED


async def test_message_level_failures_never_open_it(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([SendResult.permanent("SMTP 550: no such user")] * 5)
    engine = await engines.open(one_at_a_time())
    ids = await setup(engine, 6)
    await engine.start()
    await engines.until_empty(engine)
    states = [row.state for row in await rows(engine, ids)]
    assert states == [NotificationState.DEAD] * 5 + [NotificationState.DELIVERED]
    assert max(gaps(script)) < SETTLE_S  # never held back
    assert (await engine.circuit_states())["p"].state is CLOSED


async def test_a_run_of_5xx_spends_attempts_until_it_opens_and_none_after(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    server_error = SendResult.transient("HTTP 503 Service Unavailable", provider_fault=True)
    script.answers.extend([server_error] * 4)  # three open it, the probe fails too
    retry = RetryPolicy(base_s=60.0, jitter=0.0)  # no retry before the circuit opens
    engine = await engines.open(one_at_a_time(retry=retry))
    ids = await setup(engine, 4)
    await engine.start()
    await engines.until_empty(engine)
    failures = [row.failures for row in await rows(engine, ids)]
    # The first two spent an attempt (tried while the circuit was closed); the one that
    # opened it and the failed probe did not.
    assert sorted(failures) == [0, 0, 1, 1]
    assert all(row.state is NotificationState.DELIVERED for row in await rows(engine, ids))


async def test_a_success_between_failures_resets_the_run(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([DOWN, DOWN, SendResult.delivered(), DOWN, DOWN])
    engine = await engines.open(one_at_a_time())
    await setup(engine, 3)
    await engine.start()
    await engines.until_empty(engine)
    assert (await engine.circuit_states())["p"].state is CLOSED
    assert max(gaps(script)) < BACKOFF_S + SETTLE_S  # each held one back-off, no probe wait


async def test_two_engines_share_it_and_only_one_probes(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(message: Message) -> SendResult:
        entered.set()
        await release.wait()
        return SendResult.delivered("back")

    script.answers.extend([DOWN] * 3 + [held])
    first = await engines.open(one_at_a_time())
    ids = await setup(first, 6)
    await first.start()
    await until(clock, lambda: state(first) is OPEN, what="an open circuit")
    second = await engines.open(
        EngineSettings(dispatch=DispatcherSettings(concurrency=4, health_refresh_s=0.5))
    )
    await second.start()
    await until(clock, entered.is_set, within_s=BACKOFF_S + 1, what="the probe")
    # One probe in flight, by one engine; nobody else sends while it is out.
    await clock.sleep(30.0)
    assert len(script.calls) == 4
    assert {state(first), state(second)} == {HALF}
    release.set()
    await engines.until_empty(first)
    assert len(script.calls) == 3 + len(ids)
    assert {c.message.idempotency_key for c in script.calls} == {f"k{i}" for i in range(6)}
    assert all(row.failures == 0 for row in await rows(first, ids))
    await until(clock, lambda: state(second) is CLOSED, what="the other engine to see it")


async def test_a_probe_whose_worker_died_is_taken_over_after_its_lease(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    entered = asyncio.Event()

    async def hangs(message: Message) -> SendResult:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    script.answers.extend([DOWN] * 3 + [hangs])
    # The probe's lease: send_timeout_s + lease_s = 30 s.
    dying = one_at_a_time(send_timeout_s=20.0, lease_s=10.0, stop_timeout_s=0.1)
    first = await engines.open(dying)
    ids = await setup(first, 2)
    await first.start()
    await until(clock, entered.is_set, what="the probe")
    await first.stop()  # the probe's owner goes away mid-probe; the circuit stays half-open
    second = await engines.open(one_at_a_time(send_timeout_s=20.0, lease_s=10.0))
    await second.start()
    await engines.until_empty(second)
    taken_over_s = script.calls[4].at_s - script.calls[3].at_s
    assert 30.0 - 0.01 <= taken_over_s < 30.0 + SETTLE_S  # the lease began as the probe was taken
    assert (await second.circuit_states())["p"].state is CLOSED
    assert all(row.state is NotificationState.DELIVERED for row in await rows(second, ids))


async def test_resume_closes_it_now_and_is_audited(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([DOWN] * 3)
    engine = await engines.open(one_at_a_time())
    ids = await setup(engine, 4)
    await engine.start()
    await until(clock, lambda: state(engine) is OPEN, what="an open circuit")
    opened_at = clock.monotonic()
    resumed = await engine.circuit_close("p", actor="ops@example")
    assert (resumed.provider, resumed.state, resumed.failures) == ("p", CLOSED, 0)
    await engines.until_empty(engine)
    assert clock.monotonic() - opened_at < BACKOFF_S + SETTLE_S  # no wait for a probe
    assert all(row.failures == 0 for row in await rows(engine, ids))
    [entry] = [e for e in await engine.audit_entries() if e.action == "provider.resume"]
    assert entry.actor == "ops@example"
    with pytest.raises(NotFound, match="no provider named 'nope'"):
        await engine.circuit_close("nope", actor="ops")


async def test_circuit_options_set_the_threshold_and_backoff(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    script.answers.extend([DOWN] * 2)
    engine = await engines.open(one_at_a_time())
    await engine.tenant_add("acme")
    await engine.provider_add(
        "p", "scripted", options={"circuit_failures": "2", "circuit_backoff_s": "1.5"}
    )
    for i in range(3):
        await engine.enqueue("acme", "p", f"u{i}@example.com", key=f"k{i}")
    await engine.start()
    await engines.until_empty(engine)
    assert 1.5 - 1e-6 <= gaps(script)[1] < 1.5 + SETTLE_S, gaps(script)
