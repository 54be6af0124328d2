"""The one bridge between Qt and the engine (qasync's ``examples/qml_httpx/service.py`` shape).

``Bridge`` is the ``Sampler`` (``ui.sampler``: it samples the engine on a timer and emits a
signal only when what it carries changed) plus the commands the views call. Views never touch
the engine: they read the signals and call the commands below, each a qasync ``asyncSlot`` that
returns its task. A command that fails emits ``error`` with one sentence; nothing raises into Qt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import ParamSpec

from PySide6.QtCore import QObject, Signal

from engine import (
    Engine,
    EngineState,
    Limit,
    LimitChange,
    NotCancellable,
    NotFound,
    NotificationState,
    OmniPostError,
    Outcome,
    Pattern,
    SimulationProgress,
    Traffic,
    format_age,
    mask,
    read_tenant_file,
)
from ui.command import command
from ui.webhook_bridge import WebhookCommands

__all__ = ["Bridge"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
DemoSeeder = Callable[[Engine], Awaitable[object]]


class Bridge(WebhookCommands):
    pruned = Signal(object)  # PruneReport of this console's "prune now"
    test_sent = Signal(str)
    notice = Signal(str)
    planned = Signal(object)  # PlanReport of ``plan``
    limits_applied = Signal(object)  # tuple[LimitChange, ...] that ``apply_limits`` applied
    plan_failed = Signal(str)  # why ``plan`` or ``apply_limits`` failed, one sentence

    def __init__(
        self,
        engine: Engine,
        *,
        seed_demo: DemoSeeder | None = None,
        interval_ms: int = 500,
        history_s: float = 300.0,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(engine, interval_ms=interval_ms, history_s=history_s, parent=parent)
        self._seed_demo = seed_demo
        self._sim_task: asyncio.Task[int] | None = None

    @property
    def can_seed_demo(self) -> bool:
        return self._seed_demo is not None

    # -- dispatch --------------------------------------------------------------------------

    @command
    async def start(self) -> None:
        """Start dispatching, or resume when paused. After a stop the same engine restarts
        (a new worker id, the same limiter), so Stop then Start lets no extra burst out."""
        engine = self._engine
        if engine.state == EngineState.PAUSED:
            engine.resume()
        elif engine.state in (EngineState.STOPPED, EngineState.FAILED):
            await engine.restart()
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

    def concurrency_set(self, n: int) -> None:
        try:
            self._engine.concurrency_set(n)
        except OmniPostError as exc:
            self.report_error(exc.message)

    # -- configuration ---------------------------------------------------------------------

    @command
    async def tenant_add(self, name: str, limit: Limit | None) -> None:
        try:
            await self._engine.tenant_add(name, limit)
        finally:
            await self._reloaded("tenants", "limits")
        self.notice.emit(f"tenant {name} added")

    @command
    async def set_tenant_limit(self, name: str, limit: Limit | None) -> None:
        """Apply ``limit`` (None: unlimited) live; the store and the audit log record it."""
        try:
            await self._engine.tenant_update(name, limit=limit)
        finally:
            await self._reloaded("tenants", "limits")
        self.notice.emit(f"tenant {name}: {'unlimited' if limit is None else limit}")

    @command
    async def set_tenant_enabled(self, name: str, enabled: bool) -> None:
        try:
            await self._engine.tenant_update(name, enabled=enabled)
        finally:
            await self._reloaded("tenants")
        self.notice.emit(f"tenant {name} {'enabled' if enabled else 'disabled'}")

    @command
    async def tenant_import(self, path: str, update: bool = False) -> None:
        """Import the tenants of the JSON-lines file at ``path`` as ``omnipost tenant import``
        does: every line is checked first, and all of them are written in one transaction or
        none. A bad line, or (without ``update``) a tenant that exists, is one sentence on
        ``error`` naming its line."""
        # Read and checked on a thread: 10,000 lines take a noticeable moment.
        specs = await asyncio.to_thread(read_tenant_file, path)
        try:
            summary = await self._engine.tenant_import(specs, update=update)
        finally:
            await self._reloaded("tenants", "limits")
        self.notice.emit(str(summary))

    @command
    async def pair_limit_set(self, tenant: str, provider: str, limit: Limit | None) -> None:
        try:
            await self._engine.pair_limit_set(tenant, provider, limit)
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
                await self._engine.provider_update(
                    name, kind=kind, limit=limit, options={**removed, **options}, secrets=secrets
                )
                verb = "saved"
            else:
                await self._engine.provider_add(name, kind, limit, options, secrets)
                verb = "added"
        finally:
            await self._reloaded("providers", "limits")
        self.notice.emit(f"provider {name} {verb}")

    @command
    async def circuit_close(self, name: str) -> None:
        """Close ``name``'s circuit now (audited): its notifications go out again at once."""
        before = await self._engine.circuit_close(name)
        self.notice.emit(f"provider {name}: circuit closed (was {before.state}); sending again")
        await self.sample()

    @command
    async def provider_test_send(self, provider: str, recipient: str) -> None:
        result = await self._engine.provider_test_send(provider, recipient)
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

    # -- queue and dead letters ------------------------------------------------------------

    @command
    async def load_queue(
        self, tenant: str | None, state: NotificationState | None, limit: int = 200
    ) -> None:
        """Show the newest ``limit`` notifications of ``tenant`` (None: all) in ``state``
        (None: any), and keep them fresh while the queue view asks for it."""
        await self._follow_queue((tenant, state, limit))

    @command
    async def dead_retry(self, ids: Sequence[int] | None, tenant: str | None = None) -> None:
        """Queue dead notifications again: ``ids``, or every dead one (of ``tenant``)."""
        count, suppressed = await self._engine.dead_retry_counts(ids, tenant=tenant)
        also = f", {suppressed} suppressed instead (on a suppression list)" if suppressed else ""
        self.notice.emit(f"{count} dead notification{'s' if count != 1 else ''} queued again{also}")
        await self._requery()

    @command
    async def dead_discard(self, ids: Sequence[int] | None, tenant: str | None = None) -> None:
        count = await self._engine.dead_discard(ids, tenant=tenant)
        self.notice.emit(f"{count} dead notification{'s' if count != 1 else ''} discarded")
        await self._requery()

    @command
    async def cancel_notifications(self, targets: Sequence[tuple[str, int]]) -> None:
        """Cancel each queued notification of ``targets`` (tenant, id); one that cannot be
        (gone, or no longer queued) is said in ``error``, the others are cancelled still."""
        refused: list[str] = []
        for tenant, notification_id in targets:
            try:
                await self._engine.notification_cancel(tenant, notification_id)
            except (NotFound, NotCancellable) as exc:
                refused.append(exc.message)
        done = len(targets) - len(refused)
        self.notice.emit(f"{done} notification{'s' if done != 1 else ''} cancelled")
        if refused:
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            self.report_error(refused[0].rstrip(".") + more + ".")
        await self._requery()

    # -- store and retention ---------------------------------------------------------------

    @command
    async def load_store(self) -> None:
        """Read and send the store's retention and size now, changed or not (the store view
        was opened)."""
        await self._store_reloaded()

    @command
    async def retention_set(self, ages: Mapping[str, float | None]) -> None:
        """Change the windows named in ``ages`` (``delivered_s``, ``dead_s``, ``log_s``,
        ``audit_s``, ``suppressions_s``; None keeps forever) for every process on the store;
        the engine audits it."""
        try:
            retention = await self._engine.retention_set(**ages)
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
        ttl_s: float | None = None,
    ) -> None:
        """Start a burst of ``count`` per tenant (each with a deadline ``ttl_s`` after it is
        enqueued, when given); progress arrives on ``simulation_changed``."""
        if self._sim_task is not None and not self._sim_task.done():
            raise OmniPostError("a burst is already running; stop it first.")
        self.simulation_changed.emit(
            self._burst.begin(
                tenants,
                provider,
                count,
                pattern=pattern,
                duration_s=duration_s,
                limits=self._limits,
                now_s=time.monotonic(),
            )
        )
        task = self._sim_task = self._spawn(
            self._engine.simulate(
                tenants,
                provider,
                count,
                pattern=pattern,
                duration_s=duration_s,
                progress=self._on_progress,
                ttl_s=ttl_s,
            )
        )
        try:
            await task
        except asyncio.CancelledError:
            return
        except OmniPostError:
            self._show_burst(self._burst.stopped())
            raise
        self._show_burst(self._burst.enqueued(self._engine.clock.wall()))

    def _on_progress(self, progress: SimulationProgress) -> None:
        self._show_burst(self._burst.progress(progress.enqueued, progress.elapsed_s))

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
            self._show_burst(self._burst.stopped())

    # -- what-if planning -------------------------------------------------------------------

    @command
    async def plan(
        self,
        traffic: Traffic,
        changes: Sequence[LimitChange] = (),
        concurrency: int | None = None,
    ) -> None:
        """Plan ``traffic`` with the limits in force and, when ``changes`` or a
        ``concurrency`` are given, with them: the engine plans on a thread of its own, so the
        console keeps running. The report arrives on ``planned``."""
        with self._telling_failure():
            report = await self._engine.plan(traffic, changes=changes, concurrency=concurrency)
        self.planned.emit(report)

    @command
    async def apply_limits(self, changes: Sequence[LimitChange]) -> None:
        """Apply each change live through the same engine calls as the tenants and providers
        views, so the store and the audit log record each one. Every name is checked first:
        a change to a tenant or provider that is gone applies none of them."""
        engine = self._engine
        with self._telling_failure():
            await engine.names_check(
                tenants=[c.key.tenant for c in changes if c.key.tenant],
                providers=[c.key.provider for c in changes if c.key.provider],
            )
            limits = await engine.limits()
            try:
                for change in changes:
                    await self._apply(change, change.limit(limits.get(change.key)))
            finally:
                await self._reloaded("tenants", "providers", "limits")
        self.limits_applied.emit(tuple(changes))
        self.notice.emit(f"applied {', '.join(str(c) for c in changes)}")

    async def _apply(self, change: LimitChange, limit: Limit | None) -> None:
        key = change.key
        if key.tenant and key.provider:
            await self._engine.pair_limit_set(key.tenant, key.provider, limit)
        elif key.tenant:
            await self._engine.tenant_update(key.tenant, limit=limit)
        else:
            await self._engine.provider_update(key.provider, limit=limit)

    @contextlib.contextmanager
    def _telling_failure(self) -> Iterator[None]:
        """Say on ``plan_failed`` why the block failed (``command`` reports it as well)."""
        try:
            yield
        except OmniPostError as exc:
            self.plan_failed.emit(exc.message)
            raise
        except Exception as exc:
            self.plan_failed.emit(f"it failed unexpectedly ({type(exc).__name__}); see the log.")
            raise

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop sampling and every task of the bridge, then stop and close the engine."""
        self.closing = True
        self.stop_sampling()
        await self._cancel_simulation()
        while self._tasks:  # a command asked for just before may start meanwhile
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._engine.close()

    def __repr__(self) -> str:
        return (
            f"Bridge({self._engine!r}, every {self._timer.interval()} ms, "
            f"live={self.live}, {self.history!r})"
        )
