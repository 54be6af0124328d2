"""The reading half of the console's one bridge: what it reads from the engine, and when.

``Sampler`` takes ``engine.snapshot()`` on a ``QTimer`` into the plots' history, reads what
changes slowly (tenants, providers, limits, workers, the log, the open queue view, the store) on
its own cadence, and emits a signal only when what it carries changed. ``ui.bridge.Bridge`` adds
the commands; views only ever see the bridge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal

from engine import (
    BucketKey,
    BucketLevel,
    BucketPicks,
    Engine,
    Limit,
    NotificationState,
    OmniPostError,
    ProviderRecord,
    Snapshot,
    SnapshotView,
    TenantRecord,
    WorkerRecord,
)
from ui.fmt import fmt_bucket
from ui.history import History
from ui.logfeed import LogFeed
from ui.simulation import BurstTracker, SimulationStatus
from ui.state import QueueRow, RateMeter, Rates, Status, StoreStatus

__all__ = ["QueueQuery", "Sampler"]

T = TypeVar("T")
QueueQuery = tuple[str | None, NotificationState | None, int]  # tenant, state, newest how many

_CONFIG_EVERY_S = 2.0  # tenants, providers, limits: also changed by other processes
_WORKERS_EVERY_S = 2.0
_LOG_EVERY_S = 1.0
_QUEUE_EVERY_S = 2.0
_STORE_EVERY_S = 15.0  # retention, size, last prune: they change slowly; keep off the tick
_FOLLOWED = 12  # tenants of the queued plot followed after they left the deepest
_FILL_SERIES = 64  # bucket fills kept in the history, the ones picked last
_PRUNE_EVERY = 20  # samples between drops of the history's silent series


class Sampler(QObject):
    sampled = Signal(object)  # Snapshot; the history already holds it
    state_changed = Signal(str)
    status_changed = Signal(object)  # Status
    tenants_changed = Signal(object)  # list[TenantRecord]
    providers_changed = Signal(object)  # list[ProviderRecord]
    limits_changed = Signal(object)  # dict[BucketKey, Limit]: tenants, providers, pairs
    workers_changed = Signal(object)  # list[WorkerRecord]
    queue_changed = Signal(object)  # list[QueueRow]
    log_added = Signal(object)  # list[LogEntry], oldest first
    simulation_changed = Signal(object)  # SimulationStatus
    retention_changed = Signal(object)  # Retention
    store_changed = Signal(object)  # StoreStatus
    error = Signal(str)

    def __init__(
        self,
        engine: Engine,
        *,
        interval_ms: int = 500,
        history_s: float = 300.0,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self.history = History(max(2, round(history_s * 1000 / interval_ms)))
        self.feed = LogFeed()
        self._meter = RateMeter()
        self.rates = Rates()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._sampling: asyncio.Task[None] | None = None
        self._due: dict[str, float] = {}  # monotonic s at which each read is due again
        self._last: dict[str, object] = {}  # the last value emitted under each name
        self._tenants: list[TenantRecord] = []
        self._providers: list[ProviderRecord] = []
        self._workers: list[WorkerRecord] = []
        self._limits: Mapping[BucketKey, Limit] = {}
        self._queue_query: QueueQuery | None = None
        self._burst = BurstTracker()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False  # set by the bridge's close: commands start no more work
        self._config_load = -1  # the engine's load of its configuration last taken
        self._shown_tenants: dict[str, tuple[str, ...]] = {}  # by who shows them
        self._followed: dict[str, None] = {}  # tenants that were among the deepest, newest last
        self.fill_labels: dict[str, str] = {}  # the fill series kept, by name: their labels
        self.plotted_fills: set[str] = set()  # fill series on the dashboard: never dropped
        self._fill_keys: dict[str, BucketKey] = {}  # the fill series kept: their buckets
        # What the dashboard shows (its filter, its counts); its figures at once, the deepest
        # tenants a sample later.
        self.view = SnapshotView(totals_first=True)
        self._samples = 0

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
    def limits(self) -> Mapping[BucketKey, Limit]:
        """Every configured limit, as the engine applies it (read-only; not a copy)."""
        return self._limits

    @property
    def simulation(self) -> SimulationStatus | None:
        return self._burst.status

    @property
    def interval_ms(self) -> int:
        return self._timer.interval()

    @property
    def live(self) -> bool:
        """True while sampling on the timer."""
        return self._timer.isActive()

    @property
    def history_s(self) -> float:
        return self.history.capacity * self._timer.interval() / 1000

    def report_error(self, sentence: str) -> None:
        self.feed.error(sentence)
        self.error.emit(sentence)

    def _changed(self, name: str, value: object) -> bool:
        """Remember ``value`` under ``name``; True when it differs from the last one."""
        if name in self._last and self._last[name] == value:
            return False
        self._last[name] = value
        return True

    def _forget(self, *names: str) -> None:
        """Make the next value of ``names`` count as a change (after an edit that failed,
        views re-read the current values)."""
        for name in names:
            self._last.pop(name, None)

    def _every(self, name: str, period_s: float) -> bool:
        """True when the read ``name`` is due, and then not again for ``period_s``."""
        now = time.monotonic()
        if now < self._due.get(name, 0.0):
            return False
        self._postpone(name, period_s)
        return True

    def _postpone(self, name: str, period_s: float) -> None:
        self._due[name] = time.monotonic() + period_s

    # -- what the snapshot reads ------------------------------------------------------------

    def show_tenants(self, source: str, names: tuple[str, ...]) -> None:
        """``source`` (a view) shows these tenants now: each snapshot reads their queue and
        bucket, whatever their rank; an empty tuple when it is hidden."""
        if names:
            self._shown_tenants[source] = names
        else:
            self._shown_tenants.pop(source, None)

    def set_view(self, view: SnapshotView) -> None:
        """What the dashboard's bucket panel asks for (filter text, how many of each)."""
        self.view = view

    def snapshot_view(self) -> SnapshotView:
        """The next snapshot's view: the dashboard's, with the tenants shown anywhere, a
        running burst's and those the queued plot follows."""
        burst = self._burst.status
        names = dict.fromkeys(n for shown in self._shown_tenants.values() for n in shown)
        names.update(dict.fromkeys(burst.tenants if burst and not burst.done else ()))
        names.update(self._followed)
        plotted = tuple(self._fill_keys[n] for n in self.plotted_fills if n in self._fill_keys)
        return replace(self.view, tenants=tuple(names), buckets=plotted)

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

    def _tick(self) -> None:
        if self._sampling is None or self._sampling.done():
            self._sampling = self._spawn(self.sample())

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self.keep_task(task)
        return task

    def keep_task(self, task: asyncio.Task[Any] | None) -> None:
        """Hold ``task`` (a sample, a command under way) until it is done: closing the bridge
        cancels and awaits every one, so none reads a store that is being closed."""
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def sample(self) -> None:
        """Take one snapshot into the history and emit what changed. Store errors are shown
        once, not raised."""
        try:
            snap = await self._engine.snapshot(view=self.snapshot_view())
            self._record(snap)
            await asyncio.sleep(0)  # the views redraw in a step of their own
            self.sampled.emit(snap)
            self._emit_status(snap)
            await asyncio.sleep(0)
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
        picks = snap.picks
        picked = snap.buckets if picks is None else _picked(picks)
        for level in picked:
            values[self._fill_series(level.key)] = level.fill * 100
        for step, count in enumerate(picks.fills if picks is not None else ()):
            values[f"fills:{step}"] = float(count)
        for level in snap.buckets:  # the plotted ones, read every time
            name = f"fill:{level.key}"
            if name in self.plotted_fills:
                values[name] = level.fill * 100
        if picks is None:
            depths = snap.depth
        else:  # the plot's tenants: the deepest and those followed (not the rows on screen)
            self._follow(d.tenant for d in snap.deepest if d.queued)
            depths = tuple(d for d in snap.depth if d.tenant in self._followed)
            for name in self._followed:  # followed but gone from the depth: nothing queued
                values[f"queued:{name}"] = 0.0
        for depth in depths:
            values[f"queued:{depth.tenant}"] = float(depth.queued)
        self.history.append(snap.ts, values)
        self._samples += 1
        if self._samples % _PRUNE_EVERY == 0:
            self.history.forget_silent()

    def _fill_series(self, key: BucketKey) -> str:
        """The history's series of ``key``'s fill; at most ``_FILL_SERIES`` are kept, those
        picked last (the picks change every sample at 10,000 tenants) and those plotted."""
        name = f"fill:{key}"
        labels = self.fill_labels
        labels.pop(name, None)
        labels[name] = fmt_bucket(key)
        self._fill_keys[name] = key
        while len(labels) > _FILL_SERIES:
            gone = next(iter(labels))
            label = labels.pop(gone)
            if gone in self.plotted_fills:  # on the plot: kept, as if picked now
                labels[gone] = label
                continue
            self.history.drop(gone)
            self._fill_keys.pop(gone, None)
        return name

    def _follow(self, deepest: Iterable[str]) -> None:
        """Follow the deepest tenants' queues for the plot, the ``_FOLLOWED`` newest only."""
        for name in deepest:
            self._followed.pop(name, None)
            self._followed[name] = None
        while len(self._followed) > _FOLLOWED:
            del self._followed[next(iter(self._followed))]

    def _emit_status(self, snap: Snapshot) -> None:
        if self._changed("state", snap.state):
            self.state_changed.emit(snap.state)
        status = Status(
            store=self._engine.store_url,
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
            await self.reload_config()  # read again only when the engine loaded it again
        if self._every("workers", _WORKERS_EVERY_S):
            self._workers = await self._engine.workers()
            if self._changed("workers", self._workers):
                self.workers_changed.emit(list(self._workers))
        if self._every("log", _LOG_EVERY_S):
            await self.feed.poll(self._engine, self._tenants)
        entries = self.feed.take()
        if entries:
            self.log_added.emit(entries)
        if self._queue_query is not None and self._every("queue", _QUEUE_EVERY_S):
            await self._load_queue(*self._queue_query)
        if self._every("store", _STORE_EVERY_S):
            await self.reload_store()
        self._show_burst(self._burst.observe(snap.ts, snap.depth, time.monotonic()))

    def _show_burst(self, status: SimulationStatus | None) -> None:
        if status is not None:
            self.simulation_changed.emit(status)

    # -- configuration ---------------------------------------------------------------------

    async def reload_config(self) -> None:
        """Take tenants and limits from the engine and read the providers; emit the ones
        that changed (tenants and limits: when the engine loaded its configuration again)."""
        engine = self._engine
        applied = await engine.config_applied()
        self._providers = await engine.providers()
        if applied.load != self._config_load:
            self._config_load = applied.load
            self._forget("tenants", "limits")
            self._tenants = sorted(applied.tenants.values(), key=_by_name)
            self._limits = applied.limits
        if "tenants" not in self._last:
            self._last["tenants"] = applied.load
            self.tenants_changed.emit(list(self._tenants))
        if self._changed("providers", self._providers):
            self.providers_changed.emit(list(self._providers))
        if "limits" not in self._last:
            self._last["limits"] = applied.load
            self.limits_changed.emit(self._limits)

    async def _reloaded(self, *names: str) -> None:
        """Read the configuration again and emit ``names`` whether they changed or not."""
        self._forget(*names)
        await self.reload_config()

    # -- the queue view --------------------------------------------------------------------

    async def _follow_queue(self, query: QueueQuery) -> None:
        """Read ``query`` now and again every few seconds, until ``stop_queue_updates``."""
        self._queue_query = query
        self._postpone("queue", _QUEUE_EVERY_S)
        await self._load_queue(*query)

    def stop_queue_updates(self) -> None:
        self._queue_query = None

    async def _requery(self) -> None:
        if self._queue_query is not None:
            await self._load_queue(*self._queue_query)

    async def _load_queue(
        self, tenant: str | None, state: NotificationState | None, limit: int
    ) -> None:
        """One tenant's notifications, or (``tenant`` None) the newest of every tenant in one
        read per state (``Engine.notifications_newest``), never a read per tenant."""
        providers = {p.id: p.name for p in self._providers}
        tenants = {t.id: t.name for t in self._tenants}
        if tenant is not None:
            views = await self._engine.notifications(tenant, state=state, limit=limit)
        else:
            views = await self._engine.notifications_newest(state, limit=limit)
        rows = [
            QueueRow(
                tenants.get(v.tenant_id, str(v.tenant_id)), providers.get(v.provider_id, "?"), v
            )
            for v in views
        ]
        rows.sort(key=lambda r: r.view.id, reverse=True)
        self.queue_changed.emit(rows[:limit])

    # -- the store -------------------------------------------------------------------------

    async def reload_store(self) -> None:
        """Read the retention windows, the store's size and the last prune now; emit the
        ones that changed."""
        engine = self._engine
        retention = await engine.retention()
        size = await engine.store_size()
        status = StoreStatus(engine.store_url, size, await engine.pruned_at())
        if self._changed("retention", retention):
            self.retention_changed.emit(retention)
        if self._changed("store", status):
            self.store_changed.emit(status)

    async def _store_reloaded(self) -> None:
        """Read the store now and emit all of it, changed or not."""
        self._forget("retention", "store")
        self._postpone("store", _STORE_EVERY_S)
        await self.reload_store()


def _by_name(tenant: TenantRecord) -> str:
    return tenant.name


def _picked(picks: BucketPicks) -> list[BucketLevel]:
    """The levels of the buckets picked, each once."""
    seen: dict[BucketKey, BucketLevel] = {}
    for pick in (*picks.emptiest, *picks.busiest, *picks.matching):
        seen.setdefault(pick.level.key, pick.level)
    return list(seen.values())
