"""Fault injection: workers killed with SIGKILL, Postgres connections terminated under a
running engine, five processes on one SQLite file, and a provider that hangs.

Every run ends with nothing lost (each key delivered at least once, the store says
delivered), and every redelivery carries the key and notification id of the first delivery.
Waits are on conditions (lines in a file, counts in the store), each bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest
from sqlalchemy.engine import make_url

from engine import (
    BUILTIN_KINDS,
    CircuitState,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    Limit,
    LocalLimiter,
    Message,
    NotificationState,
    ProviderConfig,
    ProviderFactory,
    RetryPolicy,
    SecretBox,
    SendResult,
    Store,
    SystemClock,
)
from engine.store import DepthRow
from testkit.cli import Cli, clean_env, file_run, start_worker, stats_depth
from testkit.support import check_sends, eventually, read_lines, wait_until

# -- helpers -----------------------------------------------------------------------------------


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def items(provider: str, keys: list[str]) -> list[EnqueueItem]:
    """``Engine.enqueue_many`` items: one per key, each to its own recipient."""
    return [EnqueueItem(provider, f"{key}@example.com", {}, key) for key in keys]


def said(log: Path, text: str) -> bool:
    return text in log.read_text()


# -- a: SIGKILL, ten times -----------------------------------------------------------------------

KILL_COUNT = 5_000
KILLS = 10
SENDS_PER_LIFE = 150  # each worker is killed once it has sent at least this many


@pytest.mark.slow
def test_a_worker_killed_ten_times_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'omnipost.db'}"
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    cli = Cli(capsys, url)
    cli.ok("migrate")
    keys = [f"kill-{n}" for n in range(KILL_COUNT)]
    # Fast enough to finish in seconds, slow enough that each life ends mid-run.
    out = file_run(cli, tmp_path, keys, rate="1500", burst="50")

    env = clean_env(tmp_path, OMNIPOST_DB=url)
    log = tmp_path / "workers.log"
    args = ["--quiet", "--concurrency", "16", "--lease-s", "2"]

    def sent(before: int, worker: subprocess.Popen[bytes]) -> bool:
        """This life's sends are in, or it died early (checked once it is killed)."""
        return count_lines(out) >= before + SENDS_PER_LIFE or worker.poll() is not None

    for life in range(KILLS):
        before = count_lines(out)
        worker = start_worker(args, env, log)
        try:
            wait_until(functools.partial(sent, before, worker), 60, f"worker {life} to send")
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
        assert worker.returncode == -signal.SIGKILL, log.read_text()
        assert count_lines(out) < KILL_COUNT, f"the run was over before kill {life + 1}"

    last = start_worker(["--until-empty", *args], env, log)
    try:
        assert last.wait(timeout=120) == 0, log.read_text()
    finally:
        last.kill()
        last.wait()

    assert stats_depth(cli) == {
        "queued": 0,
        "leased": 0,
        "delivered": KILL_COUNT,
        "dead": 0,
    }
    kept, recount = asyncio.run(counts_and_recount(url))
    assert kept == recount, "after ten kills the kept counts differ from a recount"
    repeats = check_sends(read_lines(out), keys)
    assert "Traceback" not in log.read_text()
    print(f"{KILLS} kills, {repeats} redeliveries")


# -- in-process engines ------------------------------------------------------------------------


@dataclass
class Recorder:
    """A provider that records each send in memory: (notification id, key, attempt)."""

    name: str
    sends: list[tuple[int, str, int]] = field(default_factory=list)
    on_send: Callable[[], None] | None = None

    async def send(self, message: Message) -> SendResult:
        if self.on_send is not None:
            self.on_send()
        self.sends.append((message.notification_id, message.idempotency_key, message.attempt))
        return SendResult.delivered()

    async def aclose(self) -> None:
        pass


class Recorders:
    """A provider factory whose providers share one list of sends, across rebuilds."""

    def __init__(self, on_send: Callable[[], None] | None = None) -> None:
        self.sends: list[tuple[int, str, int]] = []
        self.on_send = on_send

    def __call__(self, config: ProviderConfig) -> Recorder:
        return Recorder(config.name, self.sends, self.on_send)

    def check(self, keys: list[str]) -> int:
        lines = [
            {"notification_id": i, "idempotency_key": k, "attempt": a, "recipient": ""}
            for i, k, a in self.sends
        ]
        return check_sends(lines, keys)


def fast_settings(**dispatch: Any) -> EngineSettings:
    """Short leases, and a reaper and heartbeat that run often, so faults heal in a second."""
    return EngineSettings(
        dispatch=DispatcherSettings(
            **{"concurrency": 16, "lease_s": 2.0, "retry": RetryPolicy(0.05, 0.2), **dispatch}
        ),
        heartbeat_s=0.2,
        reap_s=0.25,
        config_refresh_s=0.5,
    )


async def open_engine(
    store: Store, kinds: Mapping[str, ProviderFactory], settings: EngineSettings
) -> Engine:
    engine = Engine(store, LocalLimiter(SystemClock()), kinds, settings=settings)
    await engine.open()
    return engine


async def depth(store: Store) -> dict[str, int]:
    counts = dict.fromkeys(("queued", "leased", "delivered", "dead"), 0)
    for row in await store.notifications.depth():
        counts[row.state.value] += row.count
    return counts


async def counts_and_recount(url: str) -> tuple[list[DepthRow], list[DepthRow]]:
    """The kept counts and a full recount, read by a store of its own (any key will do:
    neither decrypts anything)."""
    async with Store(url, SecretBox([SecretBox.generate_key()])) as store:
        return await store.notifications.depth(), await store.notifications.recount()


# -- b: Postgres connections terminated ------------------------------------------------------

TERMINATE_COUNT = 2_000
TERMINATE_AT = (300, 900, 1_500)  # sends seen when each round of terminations happens


async def terminate_backends(database: str) -> int:
    """Terminate every connection to ``database`` but our own; returns how many there were."""
    import asyncpg

    from testkit.stores import PG_ADMIN_URL

    admin = make_url(PG_ADMIN_URL)
    conn = await asyncpg.connect(
        host=admin.host, port=admin.port or 5432, user=admin.username, database=admin.database
    )
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
    finally:
        await conn.close()
    return sum(1 for row in rows if row[0])


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_terminated_postgres_connections_heal(
    store: Store, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engine")
    recorders = Recorders()
    engine = await open_engine(store, {"record": recorders}, fast_settings())
    try:
        await engine.tenant_add("acme")  # unlimited: the run is paced by the store alone
        await engine.provider_add("rec", "record")
        keys = [f"term-{n}" for n in range(TERMINATE_COUNT)]
        for start in range(0, TERMINATE_COUNT, 500):
            await engine.enqueue_many("acme", items("rec", keys[start : start + 500]))
        await engine.start()
        database = make_url(store_url).database
        assert database is not None

        def reached(sends: int) -> bool:
            return len(recorders.sends) >= sends

        for at in TERMINATE_AT:
            await eventually(functools.partial(reached, at), 60, f"{at} sends")
            assert len(recorders.sends) < TERMINATE_COUNT, "the run was over before the fault"
            assert await terminate_backends(database) > 0
        assert await engine.run_until_empty(timeout_s=90), await depth(store)
        assert engine.failure is None and engine.state == "running"
    finally:
        await engine.close()
    assert await depth(store) == {"queued": 0, "leased": 0, "delivered": TERMINATE_COUNT, "dead": 0}
    assert await store.notifications.depth() == await store.notifications.recount()
    repeats = recorders.check(keys)
    assert "connection lost" in caplog.text, "the terminations hit no connection in use"
    print(f"{len(TERMINATE_AT)} rounds of terminations, {repeats} redeliveries")


# -- c: five processes on one SQLite file ----------------------------------------------------

SHARED_COUNT = 2_000
WORKERS = 4


async def test_four_workers_and_a_console_share_one_sqlite_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Four ``omnipost worker`` processes and an engine in this process (standing in for the
    console: it dispatches too, enqueues while they run, and reads snapshots and dead letters
    as the console's timer does). No "database is locked", no traceback, nothing lost."""
    caplog.set_level(logging.INFO)
    key = SecretBox.generate_key()
    url = f"sqlite:///{tmp_path / 'omnipost.db'}"
    out = tmp_path / "delivered.jsonl"
    keys = [f"shared-{n}" for n in range(SHARED_COUNT)]
    half = SHARED_COUNT // 2
    async with Store(url, SecretBox([key])) as store:
        await store.migrate()
        console = await open_engine(store, BUILTIN_KINDS, EngineSettings())
        try:
            # Paced (in each process) so that the run outlasts the workers' start-up.
            await console.tenant_add("acme", Limit(200, 20))
            await console.provider_add("audit", "file", options={"path": str(out)})
            await console.enqueue_many("acme", items("audit", keys[:half]))

            env = clean_env(tmp_path, OMNIPOST_DB=url, OMNIPOST_KEYS=key)
            logs = [tmp_path / f"worker-{n}.log" for n in range(WORKERS)]
            args = ["--until-empty", "-v", "--concurrency", "8"]
            workers = [start_worker(args, env, log) for log in logs]
            try:
                for log in logs:  # each has started once it says so
                    await eventually(functools.partial(said, log, "worker "), 60, "the workers")
                await console.start()
                for start in range(half, SHARED_COUNT, 100):  # more work while they run
                    await console.enqueue_many("acme", items("audit", keys[start : start + 100]))
                    await console.snapshot(with_workers=True)
                    await console.dead()
                assert await console.run_until_empty(timeout_s=120), await depth(store)
                codes = [await asyncio.to_thread(w.wait, 120) for w in workers]
            finally:
                for w in workers:
                    w.kill()
                    w.wait()
            assert console.failure is None
        finally:
            await console.close()
        assert await depth(store) == {
            "queued": 0,
            "leased": 0,
            "delivered": SHARED_COUNT,
            "dead": 0,
        }
        assert await store.notifications.depth() == await store.notifications.recount()
    outputs = {log.name: log.read_text() for log in logs}
    assert codes == [0] * WORKERS, outputs
    for name, text in [*outputs.items(), ("this process", caplog.text)]:
        assert "locked" not in text.lower(), (name, text)
        assert "Traceback" not in text, (name, text)
    check_sends(read_lines(out), keys)
    shares = [int(re.findall(r"delivered (\d+) \(", text)[-1]) for text in outputs.values()]
    assert all(shares), f"every worker took part: {shares}"
    print(f"deliveries per worker: {shares}, the rest by the console")


# -- d: a provider that hangs ----------------------------------------------------------------


class Hanging:
    """A provider, and its own factory, whose sends never return by themselves."""

    name = "hanging"

    def __init__(self) -> None:
        self.now: list[int] = []  # the notifications whose sends hang at this moment
        self.calls: list[tuple[int, int]] = []  # (notification id, attempt)
        self.overlapped = False  # one notification sent twice at once: its lease was lost
        self.seen_by_quick: list[int] = []  # len(now) at each send of the other provider

    @property
    def live(self) -> int:
        return len(self.now)

    def __call__(self, config: ProviderConfig) -> Self:
        return self

    async def send(self, message: Message) -> SendResult:
        self.overlapped |= message.notification_id in self.now
        self.calls.append((message.notification_id, message.attempt))
        self.now.append(message.notification_id)
        try:
            await asyncio.Event().wait()  # only a timeout or a cancel ends this
        finally:
            self.now.remove(message.notification_id)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


STUCK, QUICK = 4, 100


async def hang_world(
    store: Store, settings: EngineSettings
) -> tuple[Engine, Hanging, Recorders, list[str]]:
    """An opened engine with providers ``stuck`` (hangs) and ``quick``, and STUCK notifications
    queued on the first, then QUICK on the second."""
    hanging = Hanging()
    quick = Recorders(on_send=lambda: hanging.seen_by_quick.append(hanging.live))
    engine = await open_engine(store, {"hang": hanging, "record": quick}, settings)
    await engine.tenant_add("acme")
    # A failed probe would send one of them again: none within a test.
    await engine.provider_add("stuck", "hang", options={"circuit_backoff_s": "600"})
    await engine.provider_add("quick", "record")
    quick_keys = [f"quick-{n}" for n in range(QUICK)]
    await engine.enqueue_many("acme", items("stuck", [f"stuck-{n}" for n in range(STUCK)]))
    await engine.enqueue_many("acme", items("quick", quick_keys))
    return engine, hanging, quick, quick_keys


async def test_hanging_sends_time_out_while_others_flow(store: Store) -> None:
    """Sends that never answer are the provider's fault (unavailable) after ``send_timeout_s``:
    held by its circuit, which they open, queued again with no attempt spent and never dead;
    their leases, shorter than the timeout, are renewed meanwhile (never reaped nor taken
    over); the other provider's notifications are all delivered while they hang."""
    settings = fast_settings(concurrency=8, lease_s=0.5, send_timeout_s=2.5)
    settings = dataclasses.replace(settings, max_attempts=2, heartbeat_s=0.1)
    engine, hanging, quick, quick_keys = await hang_world(store, settings)
    try:
        await engine.start()

        async def held() -> bool:
            return bool(await engine.circuit_holds())

        await eventually(held, 60, "the stuck ones held by their circuit")
        [health] = await engine.circuit_holds()
    finally:
        await engine.close()
    totals = engine.telemetry.totals()  # every outcome written and counted by now
    assert (health.provider, health.state) == ("stuck", CircuitState.OPEN)
    assert health.failures >= 3 and health.last_error == "provider did not answer in 2.5s"
    assert await depth(store) == {"queued": STUCK, "leased": 0, "delivered": QUICK, "dead": 0}
    assert await store.notifications.depth() == await store.notifications.recount()
    quick.check(quick_keys)
    assert hanging.seen_by_quick[-1] > 0, "the quick ones waited for the stuck ones"
    assert sorted(a for _, a in hanging.calls) == [1] * STUCK  # no probe yet (600 s away)
    assert not hanging.overlapped and (totals.takeovers, totals.reaped) == (0, 0)
    assert (totals.held, totals.failed, totals.dead) == (STUCK, 0, 0)
    tenant = (await store.config.tenant("acme")).id
    for view in await store.notifications.list_by_tenant(tenant, state=NotificationState.QUEUED):
        assert view.last_error == "provider did not answer in 2.5s", view
        assert view.failures == 0


async def test_stopping_returns_the_leases_of_hanging_sends(store: Store) -> None:
    """Stopped while sends hang (their timeout far off): ``stop`` returns after
    ``stop_timeout_s`` and hands their leases back at once, unspent, instead of leaving them
    'leased' until they expire."""
    settings = fast_settings(lease_s=30.0, send_timeout_s=60.0, stop_timeout_s=0.3)
    engine, hanging, quick, _ = await hang_world(store, settings)
    try:
        await engine.start()
        await eventually(
            lambda: hanging.live == STUCK and len(quick.sends) == QUICK, 60, "every send"
        )
        started = time.monotonic()
        await engine.stop()
        assert time.monotonic() - started < 5.0
    finally:
        await engine.close()
    assert hanging.live == 0
    assert await depth(store) == {"queued": STUCK, "leased": 0, "delivered": QUICK, "dead": 0}
    assert await store.notifications.depth() == await store.notifications.recount()
    tenant = (await store.config.tenant("acme")).id
    for view in await store.notifications.list_by_tenant(tenant, state=NotificationState.QUEUED):
        assert (view.attempt, view.failures) == (1, 0), view
