"""The engine: a store, a limiter and providers, dispatching on the caller's event loop.

``async with Engine(...) as engine: await engine.start(); ...`` The console drives it on the
Qt loop through qasync, the CLI on a plain asyncio loop; it installs no signal handlers and
never looks the loop up before it runs on one.

This module holds the lifecycle (start, pause, stop, the supervised background tasks) and the
running engine's figures; ``Engine``'s docstring is the menu of everything it offers, each
family with the module of the façade (``engine/facade/``) that holds it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import math
import os
import random
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Self

from engine.core.clock import Clock
from engine.core.domain import NotificationState, Outcome
from engine.core.errors import ConfigError, OmniPostError
from engine.dispatch.status_events import Courier, Post
from engine.facade.api_keys import ApiKeysPart
from engine.facade.circuits import CircuitsPart
from engine.facade.configuration import ConfigurationPart
from engine.facade.notifications import NotificationsPart
from engine.facade.overview import OverviewPart
from engine.facade.parts import EngineSettings
from engine.facade.plans import PlansPart
from engine.facade.requests import RequestsPart
from engine.facade.retention import RetentionPart
from engine.facade.rotation import RotationPart
from engine.facade.status_events import StatusEventsPart
from engine.facade.suppressions import SuppressionsPart
from engine.limits.limiter import Limiter
from engine.planning.simulate import Pattern, SimulationProgress, run_simulation, schedule
from engine.providers.base import ProviderFactory
from engine.store import Store, WorkerRecord
from engine.telemetry.figures import Counters, Snapshot, build_snapshot
from engine.telemetry.snapshot_view import SnapshotView
from engine.telemetry.snapshots import SnapshotReads
from engine.telemetry.status_events import EventFigures, event_figures

__all__ = ["Engine", "EngineSettings", "EngineState", "SimulationProgress"]

log = logging.getLogger(__name__)


_FORGET_WORKERS_S = 24 * 3600.0
# The configuration is read again at least this often whatever its token says (a change that
# is not audited: an edit in SQL). Loading it costs about 1.5 s at 100,000 tenants.
_RELOAD_ANYWAY_S = 300.0
_EVENTS_EVERY_S = 5.0  # status events' figures in a snapshot, read again at most this often


class EngineState(enum.StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Engine(
    ConfigurationPart,
    NotificationsPart,
    RetentionPart,
    RotationPart,
    CircuitsPart,
    PlansPart,
    OverviewPart,
    ApiKeysPart,
    RequestsPart,
    SuppressionsPart,
    StatusEventsPart,
):
    """The engine's one face. Every public method and property, by family, each with the
    module of ``engine/facade/`` that holds it (tests/test_architecture.py keeps this true).
    Names are noun first, so that a family sorts together: ``tenant_add``, ``dead_retry``.

    - lifecycle (``engine``): ``open`` ``close`` ``start`` ``pause`` ``resume`` ``stop``
      ``restart`` ``wait_stopped`` ``follow_config`` ``run_until_empty`` ``simulate``
      ``concurrency`` ``concurrency_set``
    - figures (``engine``): ``snapshot`` ``totals`` ``recent_outcomes`` ``store_url``
      ``limiter_backend``
    - configuration (``configuration``): ``tenants`` ``tenant_page`` ``tenant_add``
      ``tenant_update`` ``tenant_import`` ``providers`` ``provider_add`` ``provider_update``
      ``provider_check`` ``provider_test_send`` ``names_check`` ``limits`` ``pair_limits``
      ``pair_limits_of`` ``pair_limit_set`` ``workers`` ``audit_entries``
    - overview (``overview``): ``config_applied`` ``config_token`` ``deliveries_after``
      ``notifications_newest``
    - notifications (``notifications``): ``enqueue`` ``enqueue_many`` ``notifications``
      ``notification_cancel`` ``deliveries`` ``dead`` ``dead_retry`` ``dead_retry_counts``
      ``dead_discard`` ``lifetimes_sweep``
    - requests of HTTP callers, one tenant each (``requests``): ``tenant`` ``tenant_limits``
      ``notification`` ``notification_page`` ``queued_count`` ``provider_known``
      ``provider_name`` ``ready`` ``request_claim`` ``request_finish`` ``request_abandon``
    - API keys (``api_keys``): ``api_keys`` ``api_key_create`` ``api_key_check``
      ``api_key_revoke``
    - suppressions (``suppressions``): ``suppressions`` ``suppression_add``
      ``suppression_add_counts`` ``suppression_remove`` ``suppression_remove_ids``
    - status events (``status_events``): ``webhooks`` ``webhooks_all`` ``webhook_add``
      ``webhook_remove`` ``webhook_secret_rotate`` ``webhook_enable`` ``webhook_test``
      ``webhook_events`` ``webhook_events_replay``
    - circuits (``circuits``): ``circuit_states`` ``circuit_holds`` ``circuit_close``
    - retention (``retention``): ``retention`` ``retention_set`` ``prune`` ``pruned_at``
      ``store_size``
    - rotation of the encryption keys (``rotation``): ``keys_rotate``
    - plans (``plans``): ``plan`` ``plan_setup``
    """

    def __init__(
        self,
        store: Store,
        limiter: Limiter,
        factories: Mapping[str, ProviderFactory],
        *,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        actor: str = "engine",
        limiter_backend: str = "local",
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            store, limiter, factories, clock=clock, settings=settings, actor=actor, rng=rng
        )
        self._limiter_backend = limiter_backend
        self.live_workers = 1  # from heartbeats; the Redis limiter's fallback shares by it
        self.state = EngineState.IDLE
        self.failure: str | None = None
        self._resumed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started_at = 0.0
        self._stopped = asyncio.Event()
        self._snapshots = SnapshotReads()
        self.courier: Courier | None = None  # status events' deliveries, while running
        self.event_post: Post | None = None  # how the courier posts (tests: on virtual time)
        self._events: EventFigures | None = None
        self._events_read_at = -math.inf

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Check the store's schema and load the configuration; does not start dispatching."""
        await self.store.ensure_current()
        await self._load_config(force=True)

    async def close(self) -> None:
        ran = self.state != EngineState.IDLE
        await self.stop()
        if ran:  # SQLite's advice for long-lived connections: statistics before closing
            try:
                await self.store.maintenance.optimize()
            except OmniPostError as exc:
                log.debug("PRAGMA optimize skipped: %s", exc.message)
        await self.directory.aclose()
        await self.limiter.aclose()

    async def start(self) -> None:
        """Start dispatching (a no-op when already running). A stop is final for ``start``:
        ``restart`` starts a stopped or failed engine again."""
        if self.state in (EngineState.RUNNING, EngineState.PAUSED):
            return
        if self.state in (EngineState.STOPPING, EngineState.STOPPED, EngineState.FAILED):
            raise OmniPostError("this engine was stopped; restart it to dispatch again.")
        self._started_at = self.clock.wall()
        self._resumed.set()
        self.state = EngineState.RUNNING
        await self._heartbeat()
        self._spawn("dispatch", self.dispatcher.run(self._resumed))
        self._spawn("complete", self.dispatcher.complete_loop())
        self._spawn("heartbeat", self._every(self.settings.heartbeat_s, self._heartbeat))
        self._spawn("reap", self._every(self.settings.reap_s, self._reap))
        self._spawn("lifetimes", self._sweep_loop())
        self._spawn("config", self._every(self.settings.config_refresh_s, self._refresh))
        self._spawn("loop-lag", self._measure_lag())
        self._spawn("listen", self.store.listen(self._notified))
        self._spawn("prune", self._prune_loop())
        if self.settings.events is not None:
            self.courier = Courier(
                self.store,
                self.limiter,
                self.clock,
                self.worker_id,
                # Its leases last as long as the dispatcher's: a dead worker's events come back
                # as soon as its notifications do.
                settings=dataclasses.replace(
                    self.settings.events, lease_s=self.settings.dispatch.lease_s
                ),
                post=self.event_post,
                telemetry=self.telemetry,
            )
            self._spawn("events", self.courier.run())

    async def follow_config(self) -> None:
        """Load configuration changes as a dispatching engine does, without dispatching (an
        HTTP API server's engine); runs until cancelled."""
        await self._every(self.settings.config_refresh_s, self._refresh)

    async def restart(self) -> None:
        """Stop if running, then start again as a new worker: a new worker id and a fresh
        dispatcher (same concurrency) over the same store, directory and limiter. The limiter's
        buckets keep their levels, so a stop and a start let no extra burst out (a new engine's
        local buckets would start full); the Redis limiter's live in Redis either way."""
        await self.stop()
        self.worker_id, self.dispatcher = self._new_worker(self.dispatcher.concurrency)
        self.failure = None
        self._stopped.clear()
        self.state = EngineState.IDLE
        await self.start()

    def pause(self) -> None:
        """Stop taking new work; sends under way finish."""
        if self.state == EngineState.RUNNING:
            self._resumed.clear()
            self.state = EngineState.PAUSED

    def resume(self) -> None:
        if self.state == EngineState.PAUSED:
            self._resumed.set()
            self.state = EngineState.RUNNING
            self.dispatcher.wake()

    async def stop(self) -> None:
        """Stop cleanly: no new leases, unsent leases returned, sends finished, outcomes written.
        Safe to call twice and from a task's done callback."""
        if self.state in (EngineState.IDLE, EngineState.STOPPED):
            self.state = EngineState.STOPPED
            return
        if self.state == EngineState.STOPPING:
            await self._stopped.wait()
            return
        failed = self.state == EngineState.FAILED
        self.state = EngineState.STOPPING
        self.dispatcher.stop_claiming()
        self._resumed.set()
        dispatch = [t for t in self._tasks if t.get_name() == "omnipost-dispatch"]
        await asyncio.gather(*dispatch, return_exceptions=True)
        try:
            await self.dispatcher.drain()
            await self._heartbeat(state="stopped")
        except OmniPostError as exc:
            log.error("stopping: %s", exc.message)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.state = EngineState.FAILED if failed else EngineState.STOPPED
        self._stopped.set()

    @property
    def limiter_backend(self) -> str:
        """``local``, ``redis``, or ``local-fallback`` while Redis is unreachable."""
        return str(getattr(self.limiter, "backend", self._limiter_backend))

    def concurrency_set(self, n: int) -> None:
        self.dispatcher.concurrency_set(n)

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(f"omnipost-{name}")
        task.add_done_callback(self._supervise)
        self._tasks.append(task)

    def _supervise(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.state in (EngineState.STOPPING, EngineState.STOPPED):
            return
        exc = task.exception()
        if exc is None:  # a side task with nothing to do (LISTEN on SQLite) just ends
            return
        if isinstance(exc, OmniPostError):  # a sentence for a person: whoever runs the
            self.failure = f"{task.get_name()} stopped: {exc.message}"  # engine shows it
            log.info("engine failing: %s", self.failure)
        else:  # a bug: its traceback goes to the log
            self.failure = f"{task.get_name()} stopped: {exc!r}"
            log.error("engine failing: %s", self.failure, exc_info=exc)
        self.state = EngineState.FAILED
        self._keep(asyncio.ensure_future(self.stop()))

    async def wait_stopped(self) -> None:
        """Return once the engine has stopped, by ``stop()`` or because it failed."""
        await self._stopped.wait()

    async def _every(self, interval_s: float, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` every ``interval_s``; a store hiccup is logged, not fatal."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except OmniPostError as exc:
                log.warning("%s: %s", getattr(step, "__name__", "step"), exc.message)

    async def _heartbeat(self, state: str | None = None) -> None:
        now = self.clock.wall()
        lease_s = self.settings.dispatch.lease_s
        await self.store.queue.renew(self.worker_id, lease_s=lease_s, now=now)
        await self.store.workers.heartbeat(
            WorkerRecord(
                id=self.worker_id,
                host=socket.gethostname()[:255],
                pid=os.getpid(),
                started_at=self._started_at or now,
                heartbeat_at=now,
                state=state or self.state.value,
                concurrency=self.dispatcher.concurrency,
                delivered=self.dispatcher.delivered,
            )
        )
        live = await self.workers()
        self.live_workers = max(1, len(live))
        share = self.settings.share_tenants
        if share or (share is None and self.limiter_backend != "local"):
            running = [(w.id, w.heartbeat_at) for w in live if w.state == EngineState.RUNNING]
            self.dispatcher.share_out(running, self.settings.worker_ttl_s)

    async def _reap(self) -> None:
        now = self.clock.wall()
        # Rows of workers silent for a day only clutter the list; live ones are never touched.
        await self.store.workers.forget(before=now - _FORGET_WORKERS_S)
        reaped = await self.store.queue.reap(now)
        if reaped:
            log.info("returned %d expired leases to the queue", reaped)
            self.telemetry.count("reaped", reaped)
            self.dispatcher.wake()

    async def _refresh(self) -> None:
        """Load the configuration again when it changed (``_load_config``), and every
        ``_RELOAD_ANYWAY_S`` whatever the token says."""
        await self._load_config(anyway_after_s=_RELOAD_ANYWAY_S)
        # Also while paused (a console that only watches): the snapshot shows this view.
        await self.dispatcher.circuits.refresh()

    async def _measure_lag(self) -> None:
        interval_s = 0.1
        while True:
            before = self.clock.monotonic()
            await asyncio.sleep(interval_s)
            lag_s = max(0.0, self.clock.monotonic() - before - interval_s)
            telemetry = self.telemetry
            telemetry.loop_lag_s = 0.8 * telemetry.loop_lag_s + 0.2 * lag_s
            telemetry.loop_stall_max_s = max(telemetry.loop_stall_max_s, lag_s)

    async def run_until_empty(self, *, timeout_s: float | None = None, poll_s: float = 0.2) -> bool:
        """Wait until no notification is queued or leased (delayed retries included), every
        outcome is written and no status event is due or being posted. Returns False on timeout
        or when the engine stopped first."""

        async def empty() -> bool:
            while self.state in (EngineState.RUNNING, EngineState.PAUSED):
                depth = await self.store.notifications.depth()
                busy = any(
                    r.count
                    for r in depth
                    if r.state in (NotificationState.QUEUED, NotificationState.LEASED)
                )
                idle = not busy and not self.dispatcher.has_pending()
                if idle and not await self.store.status_events.busy(self.clock.wall()):
                    return True
                await asyncio.sleep(poll_s)
            return False

        try:
            async with asyncio.timeout(timeout_s):
                return await empty()
        except TimeoutError:
            return False

    # -- the running engine's figures -------------------------------------------------------

    @property
    def store_url(self) -> str:
        """The store's URL with its password masked."""
        return self.store.url_masked

    @property
    def concurrency(self) -> int:
        """Sends this engine runs at once (``concurrency_set`` changes it)."""
        return self.dispatcher.concurrency

    def totals(self) -> Counters:
        """This engine's outcome counters since it was made."""
        return self.telemetry.totals()

    async def recent_outcomes(self, window_s: float = 60.0) -> dict[Outcome, int]:
        """How many sends ended in each outcome, by any worker, in the last ``window_s``."""
        return await self.store.stats.outcomes_since(self.clock.wall() - window_s)

    async def snapshot(
        self, *, with_workers: bool = False, view: SnapshotView | None = None
    ) -> Snapshot:
        """This engine's figures now. Without ``view``: the queue of every tenant and every
        bucket's level (``omnipost stats``, the metrics), a cost that grows with the tenants.
        With ``view``: only what it shows (``engine.telemetry.snapshots``): picked buckets, the
        named and deepest tenants, totals read every ``view.totals_every_s``; a cost that
        follows the view. ``with_workers`` also lists the live workers' ids (one more read of
        the store)."""
        if view is not None:
            return await self._snapshot_of(view, with_workers)
        depth = await self.store.notifications.depth()
        now = self.clock.wall()
        workers = [w.id for w in await self.workers()] if with_workers else []
        full = build_snapshot(
            now=now,
            depth_rows=depth,
            tenant_names={t.id: t.name for t in self.directory.tenants.values()},
            telemetry=self.telemetry,
            buckets=await self.limiter.levels(),
            state=self.state,
            worker_id=self.worker_id,
            concurrency=self.dispatcher.concurrency,
            inflight=self.dispatcher.inflight,
            limiter_backend=self.limiter_backend,
            workers=workers,
            failure=self.failure,
            health=self.dispatcher.circuits.view(),
        )
        return await self._with_events(full)

    async def _with_events(self, snap: Snapshot) -> Snapshot:
        """``snap`` with every endpoint's outbox (status events) and this courier's failures,
        read again at most every ``_EVENTS_EVERY_S`` (their counts follow the events waiting)."""
        now = self.clock.monotonic()
        if now - self._events_read_at >= _EVENTS_EVERY_S:
            self._events_read_at = now
            self._events = await self._event_figures()
        return snap if self._events is None else dataclasses.replace(snap, events=self._events)

    async def _event_figures(self) -> EventFigures | None:
        found = await self.store.endpoints.all_endpoints()
        failures = tuple(sorted(self.courier.failures.items())) if self.courier else ()
        if not found and not failures:
            return None
        health = await self.store.outbox.health([e.id for e in found])
        names = {t.id: t.name for t in self.directory.tenants.values()}
        return event_figures(
            found,
            health,
            names,
            now=self.clock.wall(),
            written=await self.store.outbox.highest_id(),
            failures=failures,
        )

    async def _snapshot_of(self, view: SnapshotView, with_workers: bool) -> Snapshot:
        directory = self.directory
        read = await self._snapshots.read(
            view,
            store=self.store,
            limiter=self.limiter,
            activity=self.telemetry.activity,
            limits=directory.limits,
            tenants=directory.tenants,
            providers=[p.name for p in directory.providers.values()],
            now=self.clock.monotonic(),
            wall=self.clock.wall(),
        )
        workers = [w.id for w in await self.workers()] if with_workers else []
        snap = build_snapshot(
            now=self.clock.wall(),
            depth_rows=read.depth_rows,
            tenant_names=read.tenant_names,
            telemetry=self.telemetry,
            buckets=read.levels,
            state=self.state,
            worker_id=self.worker_id,
            concurrency=self.dispatcher.concurrency,
            inflight=self.dispatcher.inflight,
            limiter_backend=self.limiter_backend,
            workers=workers,
            failure=self.failure,
            health=self.dispatcher.circuits.view(),
            picks=read.picks,
            queue=read.queue,
            deepest=read.deepest,
        )
        return await self._with_events(snap) if view.events else snap

    # -- simulation -------------------------------------------------------------------------

    async def simulate(
        self,
        tenants: Sequence[str],
        provider: str,
        count: int,
        *,
        pattern: Pattern | str = Pattern.SPIKE,
        duration_s: float = 0.0,
        progress: Callable[[SimulationProgress], None] | None = None,
        rng: random.Random | None = None,
        ttl_s: float | None = None,
    ) -> int:
        """Enqueue ``count`` notifications per tenant on ``pattern`` over ``duration_s``
        on the engine's clock (real time but in tests), each never sent later than ``ttl_s``
        after it is enqueued when given; returns how many were enqueued. Raises ConfigError
        for a bad pattern, count, duration or TTL and NotFound for an unknown name, before
        enqueueing anything. Cancel the task to stop early."""
        offsets = schedule(pattern, count, duration_s, rng)
        if ttl_s is not None and not 0 < ttl_s <= self.settings.most_ahead_s:
            raise ConfigError(f"the TTL must be a number of seconds above 0, not {ttl_s:g}.")
        for tenant in tenants:
            await self._ids(tenant, provider)
        return await run_simulation(
            self.enqueue_many,
            self.clock,
            tenants,
            provider,
            offsets,
            progress=progress,
            ttl_s=ttl_s,
        )

    def __repr__(self) -> str:
        return f"Engine({self.store!r}, state={self.state}, worker={self.worker_id})"
