"""The one bridge between Qt and the engine (qasync's ``examples/qml_httpx/service.py`` shape).

``Bridge`` holds the engine, samples ``engine.snapshot()`` on a ``QTimer``, keeps the plots'
history, and emits a signal only when what it carries changed. Views never touch the engine:
they read the signals and call the commands below, each a qasync ``asyncSlot`` that returns its
task. A command that fails emits ``error`` with one sentence; nothing raises into Qt.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import qasync
from PySide6.QtCore import QObject, QTimer, Signal

from engine import (
    Engine,
    EngineState,
    Limit,
    NotificationState,
    OmniPostError,
    Outcome,
    Pattern,
    ProviderRecord,
    SimulationProgress,
    Snapshot,
    TenantRecord,
    WorkerRecord,
    format_age,
    mask,
)
from ui.history import History
from ui.logfeed import LogFeed
from ui.state import (
    QueueRow,
    RateMeter,
    Rates,
    SimulationStatus,
    Status,
    StoreStatus,
    predict_drain,
)

__all__ = ["Bridge", "EngineFactory"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
EngineFactory = Callable[[], Awaitable[Engine]]
DemoSeeder = Callable[[Engine], Awaitable[object]]

_CONFIG_EVERY_S = 2.0  # tenants, providers, limits: also changed by other processes
_WORKERS_EVERY_S = 2.0
_LOG_EVERY_S = 1.0
_QUEUE_EVERY_S = 2.0
_STORE_EVERY_S = 15.0  # retention, size, last prune: they change slowly; keep off the tick


def command(
    fn: Callable[Concatenate[Bridge, P], Coroutine[Any, Any, None]],
) -> Callable[Concatenate[Bridge, P], asyncio.Task[None]]:
    """Make ``fn`` an ``asyncSlot`` whose errors become one sentence on ``Bridge.error``."""

    @functools.wraps(fn)
    async def guarded(self: Bridge, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            await fn(self, *args, **kwargs)
        except OmniPostError as exc:
            self.report_error(exc.message)
        except Exception as exc:  # one sentence for people; the log has the traceback
            log.exception("console command %s failed", fn.__name__)
            action = fn.__name__.strip("_").replace("_", " ")
            self.report_error(f"{action} failed unexpectedly ({type(exc).__name__}); see the log.")

    slot = qasync.asyncSlot()(guarded)
    return cast("Callable[Concatenate[Bridge, P], asyncio.Task[None]]", slot)


class Bridge(QObject):
    sampled = Signal(object)  # Snapshot; the history already holds it
    state_changed = Signal(str)
    status_changed = Signal(object)  # Status
    tenants_changed = Signal(object)  # list[TenantRecord]
    providers_changed = Signal(object)  # list[ProviderRecord]
    limits_changed = Signal(object)  # dict[str, Limit]: "tenant:T", "provider:P", "pair:T/P"
    workers_changed = Signal(object)  # list[WorkerRecord]
    queue_changed = Signal(object)  # list[QueueRow]
    log_added = Signal(object)  # list[LogEntry], oldest first
    simulation_changed = Signal(object)  # SimulationStatus
    retention_changed = Signal(object)  # Retention
    store_changed = Signal(object)  # StoreStatus
    pruned = Signal(object)  # PruneReport of this console's "prune now"
    test_sent = Signal(str)
    notice = Signal(str)
    error = Signal(str)

    def __init__(
        self,
        engine: Engine,
        *,
        reopen: EngineFactory | None = None,
        seed_demo: DemoSeeder | None = None,
        interval_ms: int = 500,
        history_s: float = 300.0,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self._reopen = reopen
        self._seed_demo = seed_demo
        self.history = History(max(2, round(history_s * 1000 / interval_ms)))
        self.feed = LogFeed()
        self._meter = RateMeter()
        self.rates = Rates()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._sampling: asyncio.Task[None] | None = None
        self._due: dict[str, float] = {}
        self._last: dict[str, object] = {}
        self._tenants: list[TenantRecord] = []
        self._providers: list[ProviderRecord] = []
        self._workers: list[WorkerRecord] = []
        self._limits: dict[str, Limit] = {}
        self._queue_query: tuple[str | None, NotificationState | None, int] | None = None
        self._sim: SimulationStatus | None = None
        self._sim_task: asyncio.Task[int] | None = None
        self._sim_started = 0.0
        self._sim_enqueued_at = math.inf  # wall time the burst's last enqueue was written
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- reading ---------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def tenants(self) -> list[TenantRecord]:
        return list(self._tenants)

    @property
    def providers(self) -> list[ProviderRecord]:
        return list(self._providers)

    @property
    def limits(self) -> dict[str, Limit]:
        return dict(self._limits)

    @property
    def can_seed_demo(self) -> bool:
        return self._seed_demo is not None

    @property
    def interval_ms(self) -> int:
        return self._timer.interval()

    @property
    def live(self) -> bool:
        """True while sampling on the timer."""
        return self._timer.isActive()

    @property
    def sampling(self) -> bool:
        """True while a sample is being taken."""
        return self._sampling is not None and not self._sampling.done()

    def _changed(self, name: str, value: object) -> bool:
        """Remember ``value`` under ``name``; True when it differs from the last one."""
        if name in self._last and self._last[name] == value:
            return False
        self._last[name] = value
        return True

    def _every(self, name: str, period_s: float) -> bool:
        now = time.monotonic()
        if now < self._due.get(name, 0.0):
            return False
        self._due[name] = now + period_s
        return True

    def report_error(self, sentence: str) -> None:
        self.feed.error(sentence)
        self.error.emit(sentence)

    # -- sampling --------------------------------------------------------------------------

    def start_sampling(self) -> None:
        """Sample now and then every ``interval_ms``; also listens to the engine's log."""
        self.feed.attach()
        self._timer.start()
        self._tick()

    def stop_sampling(self) -> None:
        self._timer.stop()
        self.feed.detach()

    def set_interval(self, interval_ms: int, history_s: float | None = None) -> None:
        """Sample every ``interval_ms`` and keep ``history_s`` seconds (default: as much time
        as before) of history."""
        keep_s = history_s if history_s is not None else self.history_s
        self._timer.setInterval(interval_ms)
        self.history.resize(max(2, round(keep_s * 1000 / interval_ms)))

    @property
    def history_s(self) -> float:
        return self.history.capacity * self._timer.interval() / 1000

    def _tick(self) -> None:
        if self._sampling is None or self._sampling.done():
            self._sampling = self._spawn(self.sample())

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def sample(self) -> None:
        """Take one snapshot into the history and emit what changed. Store errors are shown
        once, not raised."""
        try:
            snap = await self._engine.snapshot()
            self._record(snap)
            self.sampled.emit(snap)
            self._emit_status(snap)
            await self._poll(snap)
        except OmniPostError as exc:
            if self._changed("sample-error", exc.message):
                self.report_error(exc.message)
            return
        self._last.pop("sample-error", None)

    def _record(self, snap: Snapshot) -> None:
        rates = self.rates = self._meter.update(snap.ts, snap.totals)
        values: dict[str, float | None] = {
            "delivered_per_s": rates.delivered_per_s,
            "throttled_per_s": rates.throttled_per_s,
            "failed_per_s": rates.failed_per_s,
            "p50_ms": None if snap.latency_p50_s is None else snap.latency_p50_s * 1000,
            "p95_ms": None if snap.latency_p95_s is None else snap.latency_p95_s * 1000,
            "p99_ms": None if snap.latency_p99_s is None else snap.latency_p99_s * 1000,
            "lag_ms": snap.loop_lag_s * 1000,
        }
        for level in snap.buckets:
            values[f"fill:{level.key}"] = level.fill * 100
        for tenant in self._tenants:
            values[f"queued:{tenant.name}"] = 0.0
        for depth in snap.depth:
            values[f"queued:{depth.tenant}"] = float(depth.queued)
        self.history.append(snap.ts, values)

    def _emit_status(self, snap: Snapshot) -> None:
        if self._changed("state", snap.state):
            self.state_changed.emit(snap.state)
        status = Status(
            store=self._engine.store.url_masked,
            limiter_backend=snap.limiter_backend,
            state=snap.state,
            loop_lag_ms=round(snap.loop_lag_s * 1000),
            workers=len(self._workers),
            totals=snap.totals,
            failure=snap.failure,
        )
        if self._changed("status", status):
            self.status_changed.emit(status)

    async def _poll(self, snap: Snapshot) -> None:
        if self._every("config", _CONFIG_EVERY_S):
            await self.reload_config()
        if self._every("workers", _WORKERS_EVERY_S):
            self._workers = await self._engine.workers()
            if self._changed("workers", self._workers):
                self.workers_changed.emit(list(self._workers))
        if self._every("log", _LOG_EVERY_S):
            activity = {d.tenant: (d.queued, d.leased, d.delivered, d.dead) for d in snap.depth}
            await self.feed.poll(self._engine, {t.id: t.name for t in self._tenants}, activity)
        entries = self.feed.take()
        if entries:
            self.log_added.emit(entries)
        if self._queue_query is not None and self._every("queue", _QUEUE_EVERY_S):
            await self._load_queue(*self._queue_query)
        if self._every("store", _STORE_EVERY_S):
            await self.reload_store()
        self._check_simulation(snap)

    async def reload_config(self) -> None:
        """Read tenants, providers and limits now; emit the ones that changed."""
        engine = self._engine
        self._tenants = await engine.tenants()
        self._providers = await engine.providers()
        pairs = await engine.store.config.pair_limits()
        limits = {f"tenant:{t.name}": t.limit for t in self._tenants if t.limit is not None}
        limits |= {f"provider:{p.name}": p.limit for p in self._providers if p.limit is not None}
        limits |= {f"pair:{p.tenant}/{p.provider}": p.limit for p in pairs}
        self._limits = limits
        if self._changed("tenants", self._tenants):
            self.tenants_changed.emit(list(self._tenants))
        if self._changed("providers", self._providers):
            self.providers_changed.emit(list(self._providers))
        if self._changed("limits", limits):
            self.limits_changed.emit(dict(limits))

    def _forget(self, *names: str) -> None:
        """Make the next value of ``names`` count as a change (after an edit that failed,
        views re-read the current values)."""
        for name in names:
            self._last.pop(name, None)

    # -- dispatch --------------------------------------------------------------------------

    @command
    async def start(self) -> None:
        """Start dispatching, or resume when paused; after a stop, on a fresh engine."""
        engine = self._engine
        if engine.state == EngineState.PAUSED:
            engine.resume()
        elif engine.state in (EngineState.STOPPED, EngineState.FAILED):
            if self._reopen is None:
                raise OmniPostError("this engine was stopped; restart the console to dispatch.")
            concurrency = engine.dispatcher.concurrency
            await engine.close()
            self._engine = await self._reopen()
            self._engine.set_concurrency(concurrency)
            await self._engine.start()
        else:
            await engine.start()
        self.notice.emit("dispatching")
        await self.sample()

    @command
    async def pause(self) -> None:
        self._engine.pause()
        self.notice.emit("paused: no new work is taken; sends under way finish")
        await self.sample()

    @command
    async def stop(self) -> None:
        """Stop dispatching cleanly: unsent leases go back to the queue."""
        await self.stop_engine()
        self.notice.emit("stopped; unsent notifications went back to the queue")
        await self.sample()

    async def stop_engine(self) -> None:
        """Cancel a running burst and stop the engine (waits for sends under way)."""
        await self._cancel_simulation()
        await self._engine.stop()

    def set_concurrency(self, n: int) -> None:
        try:
            self._engine.set_concurrency(n)
        except OmniPostError as exc:
            self.report_error(exc.message)

    # -- configuration ---------------------------------------------------------------------

    @command
    async def add_tenant(self, name: str, limit: Limit | None) -> None:
        try:
            await self._engine.add_tenant(name, limit)
        finally:
            await self._reloaded("tenants", "limits")
        self.notice.emit(f"tenant {name} added")

    @command
    async def set_tenant_limit(self, name: str, limit: Limit | None) -> None:
        """Apply ``limit`` (None: unlimited) live; the store and the audit log record it."""
        try:
            await self._engine.update_tenant(name, limit=limit)
        finally:
            await self._reloaded("tenants", "limits")
        self.notice.emit(f"tenant {name}: {'unlimited' if limit is None else limit}")

    @command
    async def set_tenant_enabled(self, name: str, enabled: bool) -> None:
        try:
            await self._engine.update_tenant(name, enabled=enabled)
        finally:
            await self._reloaded("tenants")
        self.notice.emit(f"tenant {name} {'enabled' if enabled else 'disabled'}")

    @command
    async def set_pair_limit(self, tenant: str, provider: str, limit: Limit | None) -> None:
        try:
            await self._engine.set_pair_limit(tenant, provider, limit)
        finally:
            await self._reloaded("limits")
        self.notice.emit(f"{tenant} on {provider}: {'unlimited' if limit is None else limit}")

    @command
    async def save_provider(
        self,
        name: str,
        kind: str,
        limit: Limit | None,
        options: dict[str, str],
        secrets: dict[str, str],
    ) -> None:
        """Add the provider, or change it: options given replace, ``""`` removes one; secrets
        left out are kept."""
        try:
            if any(p.name == name for p in self._providers):
                current = next(p for p in self._providers if p.name == name)
                removed = {k: "" for k in current.options if k not in options}
                await self._engine.update_provider(
                    name, kind=kind, limit=limit, options={**removed, **options}, secrets=secrets
                )
                verb = "saved"
            else:
                await self._engine.add_provider(name, kind, limit, options, secrets)
                verb = "added"
        finally:
            await self._reloaded("providers", "limits")
        self.notice.emit(f"provider {name} {verb}")

    @command
    async def test_send(self, provider: str, recipient: str) -> None:
        result = await self._engine.test_send(provider, recipient)
        detail = f" ({result.detail})" if result.detail else ""
        verb = "delivered" if result.outcome is Outcome.DELIVERED else result.outcome.value
        self.test_sent.emit(f"test send to {mask(recipient)} via {provider}: {verb}{detail}")

    @command
    async def seed_demo(self) -> None:
        if self._seed_demo is None:
            raise OmniPostError("no demo setup is available here.")
        await self._seed_demo(self._engine)
        await self._reloaded("tenants", "providers", "limits")
        self.notice.emit("demo tenants and providers are set up; start a burst in the simulator")

    @command
    async def refresh(self) -> None:
        await self._reloaded("tenants", "providers", "limits", "workers")
        await self._store_reloaded()
        await self.sample()

    async def _reloaded(self, *names: str) -> None:
        self._forget(*names)
        await self.reload_config()

    # -- queue and dead letters ------------------------------------------------------------

    @command
    async def load_queue(
        self, tenant: str | None, state: NotificationState | None, limit: int = 200
    ) -> None:
        """Show the newest ``limit`` notifications of ``tenant`` (None: all) in ``state``
        (None: any), and keep them fresh while the queue view asks for it."""
        self._queue_query = (tenant, state, limit)
        self._due["queue"] = time.monotonic() + _QUEUE_EVERY_S
        await self._load_queue(tenant, state, limit)

    def stop_queue_updates(self) -> None:
        self._queue_query = None

    async def _load_queue(
        self, tenant: str | None, state: NotificationState | None, limit: int
    ) -> None:
        names = [tenant] if tenant is not None else [t.name for t in self._tenants]
        providers = {p.id: p.name for p in self._providers}
        rows: list[QueueRow] = []
        for name in names:
            views = await self._engine.notifications(name, state=state, limit=limit)
            rows += [QueueRow(name, providers.get(v.provider_id, "?"), v) for v in views]
        rows.sort(key=lambda r: r.view.id, reverse=True)
        self.queue_changed.emit(rows[:limit])

    @command
    async def retry_dead(self, ids: Sequence[int] | None, tenant: str | None = None) -> None:
        """Queue dead notifications again: ``ids``, or every dead one (of ``tenant``)."""
        count = await self._engine.retry_dead(ids, tenant=tenant)
        self.notice.emit(f"{count} dead notification{'s' if count != 1 else ''} queued again")
        await self._requery()

    @command
    async def discard_dead(self, ids: Sequence[int] | None, tenant: str | None = None) -> None:
        count = await self._engine.discard_dead(ids, tenant=tenant)
        self.notice.emit(f"{count} dead notification{'s' if count != 1 else ''} discarded")
        await self._requery()

    async def _requery(self) -> None:
        if self._queue_query is not None:
            await self._load_queue(*self._queue_query)

    # -- store and retention ---------------------------------------------------------------

    async def reload_store(self) -> None:
        """Read the retention windows, the store's size and the last prune now; emit the
        ones that changed."""
        engine = self._engine
        retention = await engine.retention()
        size = await engine.store_size()
        status = StoreStatus(engine.store.url_masked, size, await engine.last_pruned_at())
        if self._changed("retention", retention):
            self.retention_changed.emit(retention)
        if self._changed("store", status):
            self.store_changed.emit(status)

    async def _store_reloaded(self) -> None:
        self._forget("retention", "store")
        self._due["store"] = time.monotonic() + _STORE_EVERY_S
        await self.reload_store()

    @command
    async def load_store(self) -> None:
        """Read and send the store's retention and size now, changed or not (the store view
        was opened)."""
        await self._store_reloaded()

    @command
    async def set_retention(self, ages: Mapping[str, float | None]) -> None:
        """Change the windows named in ``ages`` (``delivered_s``, ``dead_s``, ``log_s``,
        ``audit_s``; None keeps forever) for every process on the store; the engine audits it."""
        try:
            retention = await self._engine.set_retention(**ages)
        finally:
            await self._store_reloaded()
        changes = ", ".join(
            f"{name.removesuffix('_s')} {format_age(getattr(retention, name))}" for name in ages
        )
        self.notice.emit(f"retention set: {changes}")

    @command
    async def prune(self) -> None:
        """Delete every finished row older than its window now and give the space back; the
        report arrives on ``pruned``."""
        report = await self._engine.prune()
        self.pruned.emit(report)
        self.notice.emit(f"pruned {report.total} row{'s' if report.total != 1 else ''}")
        await self._store_reloaded()

    # -- burst simulation ------------------------------------------------------------------

    @command
    async def simulate(
        self,
        tenants: Sequence[str],
        provider: str,
        count: int,
        pattern: Pattern | str = Pattern.SPIKE,
        duration_s: float = 0.0,
    ) -> None:
        """Start a burst of ``count`` per tenant; progress arrives on ``simulation_changed``."""
        if self._sim_task is not None and not self._sim_task.done():
            raise OmniPostError("a burst is already running; stop it first.")
        if not tenants:
            raise OmniPostError("choose at least one tenant for the burst.")
        arrival_s = 0.0 if Pattern(pattern) is Pattern.SPIKE else duration_s
        forecast = predict_drain(tenants, provider, count, arrival_s, self._limits)
        self._sim = SimulationStatus(
            tuple(tenants), provider, count * len(tenants), forecast=forecast
        )
        self._sim_started = time.monotonic()
        self._sim_enqueued_at = math.inf
        self.simulation_changed.emit(self._sim)
        task = self._spawn(
            self._engine.simulate(
                tenants,
                provider,
                count,
                pattern=pattern,
                duration_s=duration_s,
                progress=self._on_progress,
            )
        )
        self._sim_task = task
        try:
            await task
        except asyncio.CancelledError:
            return
        except OmniPostError:
            self._sim = _with(self._sim, enqueuing=False, stopped=True)
            self.simulation_changed.emit(self._sim)
            raise
        if self._sim is not None:
            self._sim_enqueued_at = self._engine.clock.wall()
            self._sim = _with(self._sim, enqueuing=False, enqueued=self._sim.total)
            self.simulation_changed.emit(self._sim)

    def _on_progress(self, progress: SimulationProgress) -> None:
        if self._sim is not None:
            self._sim = _with(self._sim, enqueued=progress.enqueued, elapsed_s=progress.elapsed_s)
            self.simulation_changed.emit(self._sim)

    @command
    async def stop_simulation(self) -> None:
        """Stop enqueueing; what is queued already stays queued."""
        await self._cancel_simulation()

    async def _cancel_simulation(self) -> None:
        task = self._sim_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OmniPostError):
                await task
            if self._sim is not None:
                self._sim = _with(self._sim, enqueuing=False, stopped=True)
                self.simulation_changed.emit(self._sim)

    def _check_simulation(self, snap: Snapshot) -> None:
        sim = self._sim
        if sim is None or sim.done:
            return
        elapsed_s = time.monotonic() - self._sim_started
        waiting = sum(d.queued + d.leased for d in snap.depth if d.tenant in sim.tenants)
        # A snapshot taken before the last enqueue (one awaited in _poll while the burst
        # finished) would show nothing waiting yet: only a later one can say it drained.
        if not sim.enqueuing and waiting == 0 and snap.ts >= self._sim_enqueued_at:
            self._sim = _with(sim, actual_s=elapsed_s, elapsed_s=elapsed_s)
        else:
            self._sim = _with(sim, elapsed_s=elapsed_s)
        self.simulation_changed.emit(self._sim)

    @property
    def simulation(self) -> SimulationStatus | None:
        return self._sim

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop sampling and every task of the bridge, then stop and close the engine."""
        self.stop_sampling()
        await self._cancel_simulation()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._engine.close()

    def __repr__(self) -> str:
        return (
            f"Bridge({self._engine!r}, every {self._timer.interval()} ms, "
            f"live={self.live}, {self.history!r})"
        )


def _with(sim: SimulationStatus, **changes: Any) -> SimulationStatus:
    return dataclasses.replace(sim, **changes)
