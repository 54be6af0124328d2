"""What the parts of ``Engine`` share, built once: the store, the directory, the dispatcher,
the telemetry and the clock (``EngineParts``), and the engine's settings.

Each ``*Part`` of ``engine/facade/`` is one job in one module on top of ``EngineParts``, and
imports no other part; ``Engine`` (``engine/facade/engine.py``, whose docstring is the menu)
puts them together.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.core.clock import Clock, SystemClock
from engine.core.errors import NotFound
from engine.dispatch.directory import Directory
from engine.dispatch.dispatcher import Dispatcher, DispatcherSettings
from engine.dispatch.status_events import CourierSettings
from engine.limits.limiter import Limiter
from engine.providers.base import ProviderFactory
from engine.store import Store
from engine.telemetry.figures import Telemetry

__all__ = ["EngineParts", "EngineSettings"]


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
    # Share the tenants out among the running workers (engine/dispatch/share.py): None, when
    # the limiter is shared by every process (Redis), the way workers scale out; a local
    # limiter enforces each limit per process anyway.
    share_tenants: bool | None = None
    # A notification's useful life: how often scheduled rows that fell due are queued and
    # unclaimed rows past their deadline expired, and how far ahead a send time may lie.
    sweep_s: float = 0.5
    sweep_recheck_s: float = 2.0  # the store's soonest time read again at least this often
    sweep_ahead_s: float = 2.0  # scheduled rows queued this long before their send time
    most_ahead_s: float = 35 * 86400.0
    # Status events: the courier that delivers them beside the dispatcher (None: none runs).
    events: CourierSettings | None = field(default_factory=CourierSettings)


class EngineParts:
    """Builds the parts and resolves names for every piece of the API."""

    def __init__(
        self,
        store: Store,
        limiter: Limiter,
        factories: Mapping[str, ProviderFactory],
        *,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        actor: str = "engine",
        rng: random.Random | None = None,
    ) -> None:
        # Public for tests and the composition root only; callers use the engine's methods and
        # read models, never these parts.
        self.store = store
        self.limiter = limiter
        self.factories = dict(factories)
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self.actor = actor
        self.telemetry = Telemetry(self.clock)
        self.directory = Directory(store, limiter, self.factories)
        self._rng = rng
        self.worker_id, self.dispatcher = self._new_worker(self.settings.dispatch.concurrency)
        self._side: set[asyncio.Future[None]] = set()
        # The configuration token the directory was last loaded at, and when (monotonic s).
        self._config_token: tuple[int, ...] = ()
        self._config_read_at = -math.inf
        self._sweep_at = -math.inf  # wall s: when the sweep of lifetimes next has work
        # How far ahead of their time the next sweep queues scheduled rows (at least
        # ``sweep_ahead_s``), and the rows a second its promotions were seen to queue.
        self._sweep_lead_s = self.settings.sweep_ahead_s
        self._promote_per_s = 0.0

    def _new_worker(self, concurrency: int) -> tuple[str, Dispatcher]:
        """A new worker id and a dispatcher for it over the same store, limiter, directory and
        telemetry. Worker ids are unique per start: the store fences leases on them, so a
        restarted engine must never complete what its previous run leased."""
        worker_id = f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        dispatcher = Dispatcher(
            self.store,
            self.limiter,
            self.directory,
            self.telemetry,
            self.clock,
            owner=worker_id,
            settings=self.settings.dispatch,
            rng=self._rng,
        )
        dispatcher.concurrency_set(concurrency)
        return worker_id, dispatcher

    async def _ids(self, tenant: str, provider: str | None = None) -> tuple[int, int]:
        """The store ids of ``tenant`` and ``provider`` (0 when None), looking in the store
        once when the directory does not know them yet; raises NotFound for a missing one."""
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

    async def _applied(self) -> None:
        """After a configuration change: load it, and let waiting sends see the new limits."""
        await self._load_config(force=True)
        self.dispatcher.wake()

    async def _load_config(self, *, force: bool = False, anyway_after_s: float = math.inf) -> bool:
        """Load the configuration into the directory when its token moved (every change to
        it is audited: a read of four aggregates, where loading it all takes seconds at
        100,000 tenants), when ``force``d, or when the last load is ``anyway_after_s`` old;
        True when it loaded. The token is read first: a change made during the load is seen
        at the next call."""
        token = await self.store.overview.config_token()
        stale = self.clock.monotonic() - self._config_read_at >= anyway_after_s
        if not (force or stale or token != self._config_token):
            return False
        await self.directory.refresh()
        self._config_token, self._config_read_at = token, self.clock.monotonic()
        return True

    def _keep(self, future: asyncio.Future[None]) -> None:
        """Hold a reference to ``future`` until it is done, so it is not collected mid-way."""
        self._side.add(future)
        future.add_done_callback(self._side.discard)
