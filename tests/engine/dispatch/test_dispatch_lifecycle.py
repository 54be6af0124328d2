"""The engine's life: stop, pause and resume, resizing, a dying background task, and living
inside a loop that belongs to someone else. Real engines on real stores throughout, on
virtual time (testkit/virtual_time.py) except the two ``test_real_time_*`` tests at the end,
which run on the system clock as the proof that the real clock is wired."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EngineState,
    EnqueueItem,
    FakeClock,
    Limit,
    LocalLimiter,
    Message,
    NotificationState,
    OmniPostError,
    Provider,
    ProviderConfig,
    SecretBox,
    SendResult,
    Store,
    SystemClock,
)
from engine.providers import FileProvider
from testkit.support import read_lines
from testkit.virtual_time import VirtualEngines, until

BACKGROUND = {
    "omnipost-dispatch",
    "omnipost-complete",
    "omnipost-heartbeat",
    "omnipost-reap",
    "omnipost-config",
    "omnipost-loop-lag",
}


class SlowFile:
    """The file provider behind a fixed latency on ``clock``, so that sends are under way
    when we act."""

    def __init__(self, config: ProviderConfig, clock: FakeClock) -> None:
        self.name = config.name
        self.clock = clock
        self.latency_s = float(config.options.get("latency_s", "0.02"))
        self.file = FileProvider(config.name, config.options["path"], clock=clock)

    async def send(self, message: Message) -> SendResult:
        await self.clock.sleep(self.latency_s)
        return await self.file.send(message)

    async def aclose(self) -> None:
        await self.file.aclose()


class Gauge:
    """A provider kind that counts the sends under way at once; each takes ``latency_s`` on
    ``clock``."""

    def __init__(self, clock: FakeClock, latency_s: float = 0.03) -> None:
        self.clock = clock
        self.latency_s = latency_s
        self.now = 0
        self.peak = 0

    def provider(self, config: ProviderConfig) -> Provider:
        return _GaugeProvider(config.name, self)

    def reset(self) -> None:
        self.peak = self.now


class _GaugeProvider:
    def __init__(self, name: str, gauge: Gauge) -> None:
        self.name = name
        self.gauge = gauge

    async def send(self, message: Message) -> SendResult:
        self.gauge.now += 1
        self.gauge.peak = max(self.gauge.peak, self.gauge.now)
        try:
            await self.gauge.clock.sleep(self.gauge.latency_s)
        finally:
            self.gauge.now -= 1
        return SendResult.delivered()

    async def aclose(self) -> None:
        """Nothing to release."""


Build = Callable[..., Awaitable[Engine]]


@pytest.fixture
def gauge(clock: FakeClock) -> Gauge:
    return Gauge(clock)


@pytest.fixture
async def engines(store: Store, clock: FakeClock, gauge: Gauge) -> AsyncIterator[VirtualEngines]:
    """Opens engines on virtual time with the 'slowfile' and 'gauge' kinds."""

    def slowfile(config: ProviderConfig) -> Provider:
        return SlowFile(config, clock)

    opened = VirtualEngines(store, clock, {"slowfile": slowfile, "gauge": gauge.provider})
    yield opened
    await opened.close()


@pytest.fixture
def build(engines: VirtualEngines) -> Build:
    """Opens an engine with these ``EngineSettings`` fields."""

    async def make(**settings: Any) -> Engine:
        return await engines.open(EngineSettings(**settings))

    return make


def live_tasks() -> set[str]:
    """Names of the engine's tasks that have not finished."""
    names = (t.get_name() for t in asyncio.all_tasks() if not t.done())
    return {name for name in names if name.startswith("omnipost-")}


async def states(engine: Engine) -> dict[NotificationState, int]:
    found: dict[NotificationState, int] = {}
    for row in await engine.store.notifications.depth():
        found[row.state] = found.get(row.state, 0) + row.count
    return found


def keys_in(path: Path) -> list[str]:
    return [line["idempotency_key"] for line in read_lines(path)]


async def setup(
    engine: Engine, kind: str, n: int, limit: Limit | None = None, **options: str
) -> None:
    await engine.tenant_add("acme", limit)
    await engine.provider_add("p", kind, options=options)
    items = [EnqueueItem("p", f"user{i}@example.com", {"i": i}, f"k{i}", 0) for i in range(n)]
    await engine.enqueue_many("acme", items)


# -- stopping -----------------------------------------------------------------------------


async def test_stopping_under_load_returns_every_lease_and_loses_nothing(
    build: Build, engines: VirtualEngines, tmp_path: Path
) -> None:
    out, n = tmp_path / "out.jsonl", 2000
    first = await build(dispatch=DispatcherSettings(concurrency=32))
    await setup(first, "slowfile", n, path=str(out), latency_s="0.02")
    await first.start()
    await until(engines.clock, lambda: first.dispatcher.delivered >= 300, what="300 delivered")
    await first.stop()

    assert first.state == EngineState.STOPPED
    assert live_tasks() == set()
    found = await states(first)
    assert NotificationState.LEASED not in found
    assert found.get(NotificationState.QUEUED, 0) > 0, "stopped too late to mean anything"
    sent = keys_in(out)
    assert len(sent) == len(set(sent)) == found[NotificationState.DELIVERED]
    assert found[NotificationState.DELIVERED] + found[NotificationState.QUEUED] == n
    assert first.totals().takeovers == 0

    second = await build(dispatch=DispatcherSettings(concurrency=64))
    await second.start()
    await engines.until_empty(second)
    sent = keys_in(out)
    assert sorted(sent) == sorted(f"k{i}" for i in range(n))
    assert await states(second) == {NotificationState.DELIVERED: n}


async def test_stop_is_safe_to_call_again_and_final(build: Build, tmp_path: Path) -> None:
    never_started = await build()
    await never_started.stop()
    assert never_started.state == EngineState.STOPPED

    engine = await build()
    await setup(engine, "file", 20, path=str(tmp_path / "out.jsonl"))
    await engine.start()
    await engine.start()  # already running: nothing happens
    await asyncio.gather(engine.stop(), engine.stop())
    await engine.stop()
    assert engine.state == EngineState.STOPPED
    assert live_tasks() == set()
    with pytest.raises(OmniPostError, match="stopped"):
        await engine.start()


async def test_set_concurrency_before_start_leaves_nothing_running(build: Build) -> None:
    engine = await build()
    engine.concurrency_set(8)
    await engine.close()
    assert live_tasks() == set()


# -- pause, resume, resize ----------------------------------------------------------------


async def test_pause_takes_no_new_work_and_resume_carries_on(
    build: Build, engines: VirtualEngines, clock: FakeClock, tmp_path: Path
) -> None:
    out, n = tmp_path / "out.jsonl", 60
    engine = await build()
    await setup(engine, "file", n, Limit(50.0, 5.0), path=str(out))
    await engine.start()
    await until(clock, lambda: len(keys_in(out)) >= 10, what="10 sent")
    engine.pause()
    paused = engine.state
    # Virtual time passes only once every store call has returned: a round that was under
    # way has finished its claim, and its sends have gone out.
    await clock.sleep(1.0)
    assert not engine.dispatcher.has_pending()
    sent = len(keys_in(out))
    await clock.sleep(5.0)  # ten polls: the dispatcher had every chance to claim

    assert len(keys_in(out)) == sent < n
    found = await states(engine)
    assert NotificationState.LEASED not in found
    assert found[NotificationState.QUEUED] == n - sent

    engine.resume()
    assert (paused, engine.state) == (EngineState.PAUSED, EngineState.RUNNING)
    await engines.until_empty(engine)
    assert sorted(keys_in(out)) == sorted(f"k{i}" for i in range(n))


async def test_set_concurrency_resizes_the_pool_of_sends(
    build: Build, gauge: Gauge, clock: FakeClock
) -> None:
    engine = await build(dispatch=DispatcherSettings(concurrency=2))
    await setup(engine, "gauge", 400)
    await engine.start()

    async def peak_reaching(n: int) -> int:
        """The most sends at once, from when ``n`` were first seen to 0.2 s later."""
        gauge.reset()
        await until(clock, lambda: gauge.peak >= n, within_s=5.0, what=f"{n} at once")
        await clock.sleep(0.2)
        return gauge.peak

    assert await peak_reaching(2) == 2
    engine.concurrency_set(6)
    assert engine.dispatcher.concurrency == 6
    assert await peak_reaching(6) == 6
    sleeps: list[float] = []
    engine.dispatcher.on_wait = sleeps.append
    engine.concurrency_set(1)
    # A claim under way was sized for 6: let that round end and its sends finish.
    await until(clock, lambda: bool(sleeps), what="a round's end")
    await until(clock, lambda: engine.dispatcher.inflight <= 1, what="one in flight")
    assert await peak_reaching(1) == 1
    with pytest.raises(OmniPostError, match="at least 1"):
        engine.concurrency_set(0)
    await engine.stop()
    assert live_tasks() == set()


# -- failure ------------------------------------------------------------------------------


async def test_a_background_task_that_dies_stops_the_engine_and_says_why(
    build: Build, store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_reap(now: float) -> int:
        raise RuntimeError("disk on fire")

    engine = await build(reap_s=0.01)
    await setup(engine, "file", 5, path=str(tmp_path / "out.jsonl"))
    monkeypatch.setattr(store.queue, "reap", broken_reap)
    await engine.start()
    await until(clock, lambda: engine.state == EngineState.FAILED and not live_tasks())

    assert engine.failure is not None
    assert "omnipost-reap" in engine.failure
    assert "disk on fire" in engine.failure
    assert (await engine.snapshot()).failure == engine.failure
    await engine.stop()
    assert engine.state == EngineState.FAILED
    with pytest.raises(OmniPostError):
        await engine.start()


# -- someone else's loop, on the real clock ----------------------------------------------


async def test_real_time_runs_in_the_callers_loop_without_signal_handlers(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[object] = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "add_signal_handler", lambda *a: installed.append(a))
    monkeypatch.setattr(signal, "signal", lambda *a: installed.append(a))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS)
    async with engine:
        await setup(engine, "file", 20, path=str(tmp_path / "out.jsonl"))
        await engine.start()
        assert live_tasks() >= BACKGROUND
        assert await engine.run_until_empty(timeout_s=10)
        await engine.stop()

    assert installed == []
    assert {s: signal.getsignal(s) for s in before} == before
    assert live_tasks() == set()


def test_real_time_an_engine_built_outside_any_loop_runs_on_a_later_one(
    store_url: str, box: SecretBox, tmp_path: Path
) -> None:
    """Built before a loop exists (as the console builds it before qasync starts), then run."""
    out = tmp_path / "out.jsonl"
    engine = Engine(Store(store_url, box), LocalLimiter(SystemClock()), BUILTIN_KINDS)

    async def main() -> bool:
        await engine.store.migrate()
        async with engine:
            await setup(engine, "file", 10, path=str(out))
            await engine.start()
            drained = await engine.run_until_empty(timeout_s=10)
        await engine.store.close()
        return drained

    assert asyncio.run(main())
    assert sorted(keys_in(out)) == sorted(f"k{i}" for i in range(10))
