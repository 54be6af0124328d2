"""The engine: a store, a limiter and providers, dispatching on the caller's event loop.

``async with Engine(...) as engine: await engine.start(); ...`` The console drives it on the
Qt loop through qasync, the CLI on a plain asyncio loop; it installs no signal handlers and
never looks the loop up before it runs on one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from engine.clock import Clock, SystemClock
from engine.directory import Directory
from engine.dispatcher import Dispatcher, DispatcherSettings
from engine.domain import (
    UNSET,
    Limit,
    Message,
    NotificationState,
    Outcome,
    SendResult,
    validate_name,
)
from engine.errors import ConfigError, NotFound, OmniPostError
from engine.limiter import Limiter
from engine.providers.base import ProviderConfig, ProviderFactory
from engine.retention import PruneReport, Retention
from engine.simulate import Pattern, schedule
from engine.store import (
    EnqueueResult,
    NewNotification,
    NotificationView,
    ProviderRecord,
    Store,
    StoreSize,
    TenantRecord,
    WorkerRecord,
)
from engine.telemetry import Snapshot, Telemetry, TenantDepth

__all__ = ["Engine", "EngineSettings", "EngineState", "SimulationProgress"]

log = logging.getLogger(__name__)


_FORGET_WORKERS_S = 24 * 3600.0
_PRUNE = "prune"  # the chore lease's name


@dataclass(frozen=True, slots=True)
class EngineSettings:
    dispatch: DispatcherSettings = field(default_factory=DispatcherSettings)
    heartbeat_s: float = 2.0  # lease renewal and worker heartbeat
    reap_s: float = 5.0
    config_refresh_s: float = 2.0  # picks up limits changed by other processes
    max_attempts: int = 5
    worker_ttl_s: float = 15.0  # a worker silent this long is not listed as live
    # Retention: every engine tries the prune chore this often (jittered); the store's chore
    # lease lets one of them run it per period. A background pass stops after its budget and
    # the next one goes on where it stopped.
    prune_s: float = 300.0
    prune_budget_s: float = 20.0


class EngineState:
    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SimulationProgress:
    enqueued: int
    total: int
    elapsed_s: float


class Engine:
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
        self.store = store
        self.limiter = limiter
        self.factories = dict(factories)
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self.actor = actor
        self._limiter_backend = limiter_backend
        self.live_workers = 1  # from heartbeats; the Redis limiter's fallback shares by it
        self.worker_id = f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.telemetry = Telemetry(self.clock)
        self.directory = Directory(store, limiter, self.factories)
        self.dispatcher = Dispatcher(
            store,
            limiter,
            self.directory,
            self.telemetry,
            self.clock,
            owner=self.worker_id,
            settings=self.settings.dispatch,
            rng=rng,
        )
        self.state = EngineState.IDLE
        self.failure: str | None = None
        self._resumed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started_at = 0.0
        self._stopped = asyncio.Event()
        self._side: set[asyncio.Future[None]] = set()

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
        await self.directory.refresh()

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
        """Start dispatching (a no-op when already running)."""
        if self.state in (EngineState.RUNNING, EngineState.PAUSED):
            return
        if self.state in (EngineState.STOPPING, EngineState.STOPPED, EngineState.FAILED):
            raise OmniPostError("this engine was stopped; open a new one.")
        self._started_at = self.clock.wall()
        self._resumed.set()
        self.state = EngineState.RUNNING
        await self._heartbeat()
        self._spawn("dispatch", self.dispatcher.run(self._resumed))
        self._spawn("complete", self.dispatcher.complete_loop())
        self._spawn("heartbeat", self._every(self.settings.heartbeat_s, self._heartbeat))
        self._spawn("reap", self._every(self.settings.reap_s, self._reap))
        self._spawn("config", self._every(self.settings.config_refresh_s, self._refresh))
        self._spawn("loop-lag", self._measure_lag())
        self._spawn("listen", self.store.listen(self.dispatcher.wake))
        self._spawn("prune", self._prune_loop())

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

    def set_concurrency(self, n: int) -> None:
        self.dispatcher.set_concurrency(n)

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
        reason = exc.message if isinstance(exc, OmniPostError) else repr(exc)
        self.failure = f"{task.get_name()} stopped: {reason}"
        log.error("engine failing: %s", self.failure, exc_info=exc)
        self.state = EngineState.FAILED
        self._keep(asyncio.ensure_future(self.stop()))

    def _keep(self, future: asyncio.Future[None]) -> None:
        self._side.add(future)
        future.add_done_callback(self._side.discard)

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
        await self.store.config.heartbeat(
            WorkerRecord(
                id=self.worker_id,
                host=socket.gethostname()[:255],
                pid=os.getpid(),
                started_at=self._started_at or now,
                heartbeat_at=now,
                state=state or self.state,
                concurrency=self.dispatcher.concurrency,
                delivered=self.dispatcher.delivered,
            )
        )
        self.live_workers = max(1, len(await self.workers()))

    async def _reap(self) -> None:
        now = self.clock.wall()
        # Rows of workers silent for a day only clutter the list; live ones are never touched.
        await self.store.config.forget_workers(before=now - _FORGET_WORKERS_S)
        reaped = await self.store.queue.reap(now)
        if reaped:
            log.info("returned %d expired leases to the queue", reaped)
            self.telemetry.count("reaped", reaped)
            self.dispatcher.wake()

    async def _refresh(self) -> None:
        await self.directory.refresh()

    async def _prune_loop(self) -> None:
        """Retention in the background: every ``prune_s`` (jittered, so that engines started
        together spread out), take the prune chore if no other engine holds it, and prune for
        at most ``prune_budget_s``. A store hiccup is logged and tried again next period."""
        period_s = self.settings.prune_s
        await asyncio.sleep(period_s * random.uniform(0.1, 1.0))
        while True:
            try:
                await self._prune_chore(period_s)
            except OmniPostError as exc:
                log.warning("pruning: %s", exc.message)
            await asyncio.sleep(period_s * random.uniform(0.8, 1.2))

    async def _prune_chore(self, period_s: float) -> None:
        maintenance = self.store.maintenance
        now = self.clock.wall()
        if not await maintenance.try_chore(_PRUNE, self.worker_id, hold_s=period_s, now=now):
            return
        deadline = self.clock.monotonic() + self.settings.prune_budget_s
        report = await self._prune_now(should_stop=lambda: self.clock.monotonic() > deadline)
        if not report.total:
            await maintenance.optimize()  # done by _prune_now when it deleted something
        await maintenance.chore_done(_PRUNE, now=self.clock.wall())
        if report.total:
            log.info(
                "pruned %d delivered, %d dead, %d delivery-log and %d audit rows%s",
                report.delivered,
                report.dead,
                report.delivery_log,
                report.audit_log,
                "" if report.complete else " (more next time)",
            )

    async def _measure_lag(self) -> None:
        interval_s = 0.1
        while True:
            before = self.clock.monotonic()
            await asyncio.sleep(interval_s)
            lag_s = max(0.0, self.clock.monotonic() - before - interval_s)
            self.telemetry.loop_lag_s = 0.8 * self.telemetry.loop_lag_s + 0.2 * lag_s

    async def run_until_empty(self, *, timeout_s: float | None = None, poll_s: float = 0.2) -> bool:
        """Wait until no notification is queued or leased (delayed retries included) and every
        outcome is written. Returns False on timeout or when the engine stopped first."""

        async def empty() -> bool:
            while self.state in (EngineState.RUNNING, EngineState.PAUSED):
                depth = await self.store.queue.depth()
                busy = any(
                    r.count
                    for r in depth
                    if r.state in (NotificationState.QUEUED, NotificationState.LEASED)
                )
                if not busy and not self.dispatcher.has_pending():
                    return True
                await asyncio.sleep(poll_s)
            return False

        try:
            async with asyncio.timeout(timeout_s):
                return await empty()
        except TimeoutError:
            return False

    # -- configuration ----------------------------------------------------------------------

    async def add_tenant(
        self, name: str, limit: Limit | None = None, *, enabled: bool = True
    ) -> TenantRecord:
        record = await self.store.config.add_tenant(
            name, limit, enabled=enabled, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return record

    async def update_tenant(
        self, name: str, *, limit: Limit | None = UNSET, enabled: bool | None = None
    ) -> TenantRecord:
        """Change a tenant's limit (``None`` removes it) or enabled flag; applied live."""
        record = await self.store.config.update_tenant(
            name, limit=limit, enabled=enabled, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return record

    def check_provider(
        self, name: str, kind: str, options: Mapping[str, str], secrets: Mapping[str, str]
    ) -> None:
        """Raise ConfigError with one sentence unless the provider could be built as given."""
        validate_name("provider", name)
        factory = self.factories.get(kind)
        if factory is None:
            kinds = ", ".join(sorted(self.factories))
            raise ConfigError(f"provider kind {kind!r} is not known; use one of {kinds}.")
        provider = factory(ProviderConfig(name, kind, dict(options), dict(secrets)))
        # Built only to validate; nothing was opened yet, so closing is cheap.
        self._keep(asyncio.ensure_future(provider.aclose()))

    async def add_provider(
        self,
        name: str,
        kind: str,
        limit: Limit | None = None,
        options: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> ProviderRecord:
        self.check_provider(name, kind, options or {}, secrets or {})
        record = await self.store.config.add_provider(
            name, kind, limit, options or {}, secrets or {}, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return record

    async def update_provider(
        self,
        name: str,
        *,
        kind: str | None = None,
        limit: Limit | None = UNSET,
        options: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> ProviderRecord:
        current = await self.store.config.provider(name, with_secrets=True)
        merged_options = {**current.options, **(options or {})}
        merged_secrets = {**current.secrets, **(secrets or {})}
        self.check_provider(
            name,
            kind or current.kind,
            {k: v for k, v in merged_options.items() if v != ""},
            {k: v for k, v in merged_secrets.items() if v != ""},
        )
        record = await self.store.config.update_provider(
            name,
            kind=kind,
            limit=limit,
            options=options,
            secrets=secrets,
            now=self.clock.wall(),
            actor=self.actor,
        )
        await self._applied()
        return record

    async def set_pair_limit(self, tenant: str, provider: str, limit: Limit | None) -> None:
        await self.store.config.set_pair_limit(
            tenant, provider, limit, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()

    async def _applied(self) -> None:
        await self.directory.refresh()
        self.dispatcher.wake()

    async def tenants(self) -> list[TenantRecord]:
        return await self.store.config.tenants()

    async def providers(self) -> list[ProviderRecord]:
        return await self.store.config.providers()

    async def workers(self) -> list[WorkerRecord]:
        since = self.clock.wall() - self.settings.worker_ttl_s
        return await self.store.config.workers(alive_since=since)

    async def _ids(self, tenant: str, provider: str | None = None) -> tuple[int, int]:
        tenant_id = self.directory.tenant_id(tenant)
        provider_id = self.directory.provider_id(provider) if provider is not None else 0
        if tenant_id is None or provider_id is None:
            await self.directory.refresh()
            tenant_id = self.directory.tenant_id(tenant)
            provider_id = self.directory.provider_id(provider) if provider is not None else 0
        if tenant_id is None:
            raise NotFound(f"no tenant named {tenant!r}.")
        if provider_id is None:
            raise NotFound(f"no provider named {provider!r}.")
        return tenant_id, provider_id

    # -- retention --------------------------------------------------------------------------

    async def retention(self) -> Retention:
        """The store's retention windows, as every process sharing the store applies them."""
        return await self.store.maintenance.retention()

    async def set_retention(self, **ages: float | None) -> Retention:
        """Change some windows (``delivered_s``, ``dead_s``, ``log_s``, ``audit_s``; ``None``
        keeps forever) for every process; audited. Raises ConfigError for a bad age or name."""
        retention = (await self.retention()).changed(**ages)
        await self.store.maintenance.set_retention(
            retention, now=self.clock.wall(), actor=self.actor
        )
        return retention

    async def prune(self, *, dry_run: bool = False) -> PruneReport:
        """One whole pass now, whatever other engines do: delete (or, with ``dry_run``, count)
        every finished row older than its window, then give the space back."""
        report = await self._prune_now(dry_run=dry_run)
        if not dry_run:
            await self.store.maintenance.chore_done(_PRUNE, now=self.clock.wall())
        return report

    async def _prune_now(
        self, *, dry_run: bool = False, should_stop: Callable[[], bool] = lambda: False
    ) -> PruneReport:
        maintenance = self.store.maintenance
        report = await maintenance.prune(
            await maintenance.retention(),
            now=self.clock.wall(),
            dry_run=dry_run,
            should_stop=should_stop,
        )
        if report.total and not dry_run:
            report = dataclasses.replace(report, freed_bytes=await maintenance.release_space())
        return report

    async def store_size(self) -> StoreSize:
        return await self.store.maintenance.size()

    async def last_pruned_at(self) -> float | None:
        """When a prune pass (in the background or asked for) last finished, or None."""
        return await self.store.maintenance.chore_last_run(_PRUNE)

    # -- notifications ----------------------------------------------------------------------

    async def enqueue(
        self,
        tenant: str,
        provider: str,
        recipient: str,
        payload: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        priority: int = 0,
    ) -> EnqueueResult:
        """Queue one notification; with a key the tenant used before, return that one instead."""
        results = await self.enqueue_many(
            tenant, [(provider, recipient, payload or {}, key, priority)]
        )
        return results[0]

    async def enqueue_many(
        self,
        tenant: str,
        items: Sequence[tuple[str, str, dict[str, Any], str | None, int]],
    ) -> list[EnqueueResult]:
        """Queue ``(provider, recipient, payload, key, priority)`` items of one tenant together."""
        tenant_id, _ = await self._ids(tenant)
        provider_ids = {name: (await self._ids(tenant, name))[1] for name in {i[0] for i in items}}
        rows = []
        for provider, recipient, payload, key, priority in items:
            rows.append(
                _new(
                    provider_ids[provider],
                    recipient=recipient,
                    payload=payload,
                    key=key,
                    priority=priority,
                    max_attempts=self.settings.max_attempts,
                )
            )
        results = await self.store.queue.enqueue(tenant_id, rows, now=self.clock.wall())
        self.dispatcher.wake()
        return results

    async def notifications(
        self, tenant: str, *, state: NotificationState | None = None, limit: int = 100
    ) -> list[NotificationView]:
        tenant_id, _ = await self._ids(tenant)
        return await self.store.queue.list_by_tenant(tenant_id, state=state, limit=limit)

    async def dead(
        self, tenant: str | None = None, *, limit: int = 1000
    ) -> list[tuple[str, NotificationView]]:
        """Dead notifications as (tenant name, view), of one tenant or of every tenant."""
        names = [tenant] if tenant is not None else [t.name for t in await self.tenants()]
        found: list[tuple[str, NotificationView]] = []
        for name in names:
            rows = await self.notifications(name, state=NotificationState.DEAD, limit=limit)
            found.extend((name, row) for row in rows)
        return found

    async def retry_dead(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        """Queue dead notifications again; ``ids=None`` means every dead one (of ``tenant``)."""
        return await self._repair("dead.retry", ids, tenant)

    async def discard_dead(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        return await self._repair("dead.discard", ids, tenant)

    async def _repair(self, action: str, ids: Sequence[int] | None, tenant: str | None) -> int:
        names = [tenant] if tenant is not None else [t.name for t in await self.tenants()]
        total = 0
        for name in names:
            tenant_id, _ = await self._ids(name)
            now = self.clock.wall()
            if action == "dead.retry":
                count = await self.store.queue.retry_dead(tenant_id, ids, now=now)
            else:
                count = await self.store.queue.discard_dead(tenant_id, ids)
            if count:
                detail = {"count": count, "ids": list(ids) if ids is not None else "all"}
                await self.store.config.audit(self.actor, action, tenant_id, detail, now=now)
            total += count
        self.dispatcher.wake()
        return total

    async def test_send(
        self, provider: str, recipient: str, payload: dict[str, Any] | None = None
    ) -> SendResult:
        """Send one message through ``provider`` now, outside the queue and the limits."""
        await self.directory.refresh()
        provider_id = self.directory.provider_id(provider)
        if provider_id is None:
            raise NotFound(f"no provider named {provider!r}.")
        instance = self.directory.instances.get(provider_id)
        if instance is None:
            reason = self.directory.broken.get(provider_id, "it is not configured")
            raise ConfigError(f"provider {provider!r} cannot send: {reason}.")
        message = Message(
            notification_id=0,
            tenant="omnipost-test",
            provider=provider,
            recipient=recipient,
            payload=payload or {"subject": "OmniPost test", "text": "A test send from OmniPost."},
            idempotency_key=f"test-{uuid.uuid4().hex}",
            attempt=1,
        )
        return await instance.send(message)

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
    ) -> int:
        """Enqueue ``count`` notifications per tenant on ``pattern`` over ``duration_s``,
        in real time; returns how many were enqueued. Cancel the task to stop early."""
        offsets = schedule(pattern, count, duration_s, rng)
        for tenant in tenants:
            await self._ids(tenant, provider)
        run = uuid.uuid4().hex[:10]
        start = self.clock.monotonic()
        done = 0
        while done < count:
            elapsed = self.clock.monotonic() - start
            upto = done
            while upto < count and offsets[upto] <= elapsed and upto - done < 500:
                upto += 1
            if upto == done:
                await asyncio.sleep(min(0.05, offsets[done] - elapsed))
                continue
            for tenant in tenants:
                items = [
                    (
                        provider,
                        f"sim{i}@{tenant}.example",
                        {"sim": run, "n": i},
                        f"sim-{run}-{i}",
                        0,
                    )
                    for i in range(done, upto)
                ]
                await self.enqueue_many(tenant, items)
            done = upto
            if progress is not None:
                progress(SimulationProgress(done * len(tenants), count * len(tenants), elapsed))
        return count * len(tenants)

    # -- telemetry --------------------------------------------------------------------------

    async def snapshot(self, *, with_workers: bool = False) -> Snapshot:
        depth = await self.store.queue.depth()
        now = self.clock.wall()
        names = {t.id: t.name for t in self.directory.tenants.values()}
        per: dict[int, dict[str, Any]] = {}
        for row in depth:
            entry = per.setdefault(row.tenant_id, {"oldest": None})
            entry[row.state.value] = row.count
            if row.state is NotificationState.QUEUED and row.oldest_enqueued_at is not None:
                entry["oldest"] = max(0.0, now - row.oldest_enqueued_at)
        depths = tuple(
            TenantDepth(
                tenant=names.get(tid, str(tid)),
                queued=e.get("queued", 0),
                leased=e.get("leased", 0),
                delivered=e.get("delivered", 0),
                dead=e.get("dead", 0),
                oldest_queued_age_s=e["oldest"],
            )
            for tid, e in sorted(per.items())
        )
        workers = tuple(w.id for w in await self.workers()) if with_workers else ()
        p50, p95, p99 = self.telemetry.latency_percentiles()
        t = self.telemetry
        return Snapshot(
            ts=now,
            state=self.state,
            worker_id=self.worker_id,
            concurrency=self.dispatcher.concurrency,
            inflight=self.dispatcher.inflight,
            limiter_backend=self.limiter_backend,
            buckets=tuple(await self.limiter.levels()),
            depth=depths,
            totals=t.totals(),
            delivered_per_s=t.rate_per_s(Outcome.DELIVERED),
            throttled_per_s=t.rate_per_s(Outcome.THROTTLED),
            failed_per_s=t.rate_per_s(Outcome.TRANSIENT, Outcome.PERMANENT),
            latency_p50_s=p50,
            latency_p95_s=p95,
            latency_p99_s=p99,
            loop_lag_s=t.loop_lag_s,
            workers=workers,
            failure=self.failure,
        )

    def __repr__(self) -> str:
        return f"Engine({self.store!r}, state={self.state}, worker={self.worker_id})"


def _new(
    provider_id: int,
    *,
    recipient: str,
    payload: dict[str, Any],
    key: str | None,
    priority: int,
    max_attempts: int,
) -> NewNotification:
    if not recipient:
        raise ConfigError("the recipient must not be empty.")
    if key is not None and not 0 < len(key) <= 200:
        raise ConfigError("an idempotency key must be 1 to 200 characters.")
    for what, text in (("the recipient", recipient), ("the idempotency key", key or "")):
        if not _is_text(text):  # undecodable bytes from a shell or a file: no UTF-8 form
            raise ConfigError(f"{what} holds characters that are not valid Unicode text.")
    return NewNotification(
        provider_id=provider_id,
        recipient=recipient,
        payload=payload,
        idempotency_key=key or uuid.uuid4().hex,
        priority=priority,
        max_attempts=max_attempts,
    )


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
