"""The engine's life: stop, pause and resume, resizing, a dying background task, and living
inside a loop that belongs to someone else. Real engines on real stores throughout."""

from __future__ import annotations

import asyncio
import json
import signal
import time
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

BACKGROUND = {
    "omnipost-dispatch",
    "omnipost-complete",
    "omnipost-heartbeat",
    "omnipost-reap",
    "omnipost-config",
    "omnipost-loop-lag",
}


class SlowFile:
    """The file provider behind a fixed latency, so that sends are under way when we act."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.latency_s = float(config.options.get("latency_s", "0.02"))
        self.file = FileProvider(config.name, config.options["path"])

    async def send(self, message: Message) -> SendResult:
        await asyncio.sleep(self.latency_s)
        return await self.file.send(message)

    async def aclose(self) -> None:
        await self.file.aclose()


class Gauge:
    """A provider kind that counts the sends under way at once."""

    def __init__(self, latency_s: float = 0.03) -> None:
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
            await asyncio.sleep(self.gauge.latency_s)
        finally:
            self.gauge.now -= 1
        return SendResult.delivered()

    async def aclose(self) -> None:
        """Nothing to release."""


Build = Callable[..., Awaitable[Engine]]


@pytest.fixture
def gauge() -> Gauge:
    return Gauge()


@pytest.fixture
async def build(store: Store, gauge: Gauge) -> AsyncIterator[Build]:
    """Opens engines with full settings and the 'slowfile' and 'gauge' kinds."""
    engines: list[Engine] = []
    factories = {**BUILTIN_KINDS, "slowfile": SlowFile, "gauge": gauge.provider}

    async def make(**settings: Any) -> Engine:
        engine = Engine(
            store, LocalLimiter(SystemClock()), factories, settings=EngineSettings(**settings)
        )
        await engine.open()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()


def live_tasks() -> set[str]:
    """Names of the engine's tasks that have not finished."""
    names = (t.get_name() for t in asyncio.all_tasks() if not t.done())
    return {name for name in names if name.startswith("omnipost-")}


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s"
        await asyncio.sleep(0.01)


async def states(engine: Engine) -> dict[NotificationState, int]:
    found: dict[NotificationState, int] = {}
    for row in await engine.store.queue.depth():
        found[row.state] = found.get(row.state, 0) + row.count
    return found


def keys_in(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines()]


async def setup(
    engine: Engine, kind: str, n: int, limit: Limit | None = None, **options: str
) -> None:
    await engine.add_tenant("acme", limit)
    await engine.add_provider("p", kind, options=options)
    items = [("p", f"user{i}@example.com", {"i": i}, f"k{i}", 0) for i in range(n)]
    await engine.enqueue_many("acme", items)


# -- stopping -----------------------------------------------------------------------------


async def test_stopping_under_load_returns_every_lease_and_loses_nothing(
    build: Build, tmp_path: Path
) -> None:
    out, n = tmp_path / "out.jsonl", 2000
    first = await build(dispatch=DispatcherSettings(concurrency=32))
    await setup(first, "slowfile", n, path=str(out), latency_s="0.02")
    await first.start()
    await eventually(lambda: first.dispatcher.delivered >= 300)
    await first.stop()

    assert first.state == EngineState.STOPPED
    assert live_tasks() == set()
    found = await states(first)
    assert NotificationState.LEASED not in found
    assert found.get(NotificationState.QUEUED, 0) > 0, "stopped too late to mean anything"
    sent = keys_in(out)
    assert len(sent) == len(set(sent)) == found[NotificationState.DELIVERED]
    assert found[NotificationState.DELIVERED] + found[NotificationState.QUEUED] == n
    assert first.telemetry.totals().takeovers == 0

    second = await build(dispatch=DispatcherSettings(concurrency=64))
    await second.start()
    assert await second.run_until_empty(timeout_s=30)
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
    engine.set_concurrency(8)
    await engine.close()
    assert live_tasks() == set()


# -- pause, resume, resize ----------------------------------------------------------------


async def test_pause_takes_no_new_work_and_resume_carries_on(build: Build, tmp_path: Path) -> None:
    out, n = tmp_path / "out.jsonl", 60
    engine = await build()
    await setup(engine, "file", n, Limit(50.0, 5.0), path=str(out))
    await engine.start()
    await eventually(lambda: len(keys_in(out)) >= 10)
    engine.pause()
    assert engine.state == EngineState.PAUSED
    await asyncio.sleep(0.5)  # a round that was under way finishes its claim
    await eventually(lambda: not engine.dispatcher.has_pending())
    sent = len(keys_in(out))
    await asyncio.sleep(0.6)  # longer than a poll: the dispatcher had its chance to claim

    assert len(keys_in(out)) == sent < n
    found = await states(engine)
    assert NotificationState.LEASED not in found
    assert found[NotificationState.QUEUED] == n - sent

    engine.resume()
    assert engine.state == EngineState.RUNNING
    assert await engine.run_until_empty(timeout_s=10)
    assert sorted(keys_in(out)) == sorted(f"k{i}" for i in range(n))


async def test_set_concurrency_resizes_the_pool_of_sends(build: Build, gauge: Gauge) -> None:
    engine = await build(dispatch=DispatcherSettings(concurrency=2))
    await setup(engine, "gauge", 400)
    await engine.start()

    async def peak_reaching(n: int) -> int:
        """The most sends at once, from when ``n`` were first seen to 0.2 s later."""
        gauge.reset()
        await eventually(lambda: gauge.peak >= n, timeout_s=5.0)
        await asyncio.sleep(0.2)
        return gauge.peak

    assert await peak_reaching(2) == 2
    engine.set_concurrency(6)
    assert engine.dispatcher.concurrency == 6
    assert await peak_reaching(6) == 6
    sleeps: list[float] = []
    engine.dispatcher.on_wait = sleeps.append
    engine.set_concurrency(1)
    # A claim under way was sized for 6: let that round end and its sends finish.
    await eventually(lambda: bool(sleeps))
    await eventually(lambda: engine.dispatcher.inflight <= 1)
    assert await peak_reaching(1) == 1
    with pytest.raises(OmniPostError, match="at least 1"):
        engine.set_concurrency(0)
    await engine.stop()
    assert live_tasks() == set()


# -- failure ------------------------------------------------------------------------------


async def test_a_background_task_that_dies_stops_the_engine_and_says_why(
    build: Build, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_reap(now: float) -> int:
        raise RuntimeError("disk on fire")

    engine = await build(reap_s=0.01)
    await setup(engine, "file", 5, path=str(tmp_path / "out.jsonl"))
    monkeypatch.setattr(store.queue, "reap", broken_reap)
    await engine.start()
    await eventually(lambda: engine.state == EngineState.FAILED and not live_tasks())

    assert engine.failure is not None
    assert "omnipost-reap" in engine.failure
    assert "disk on fire" in engine.failure
    assert (await engine.snapshot()).failure == engine.failure
    await engine.stop()
    assert engine.state == EngineState.FAILED
    with pytest.raises(OmniPostError):
        await engine.start()


# -- someone else's loop ------------------------------------------------------------------


async def test_runs_in_the_callers_loop_without_signal_handlers(
    build: Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[object] = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "add_signal_handler", lambda *a: installed.append(a))
    monkeypatch.setattr(signal, "signal", lambda *a: installed.append(a))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    engine = await build()
    await setup(engine, "file", 20, path=str(tmp_path / "out.jsonl"))
    await engine.start()
    assert live_tasks() >= BACKGROUND
    assert await engine.run_until_empty(timeout_s=10)
    await engine.stop()

    assert installed == []
    assert {s: signal.getsignal(s) for s in before} == before
    assert live_tasks() == set()


def test_an_engine_built_outside_any_loop_runs_on_a_later_one(
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
