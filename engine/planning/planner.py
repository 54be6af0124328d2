"""What-if planning: the real dispatcher, run in virtual time over an in-memory queue.

``run_plan`` builds what an engine builds (a ``Directory``, a ``LocalLimiter`` over the
limits, a ``Dispatcher`` with the engine's settings) on ``engine.planning.virtual_loop``'s
loop, whose clock jumps to the next timer whenever every task waits, over
``engine.planning.memory_store``'s queue,
with each provider replaced by a ``SimulatedProvider`` that answers as its ``ProviderModel``
says. Arrivals are fed at their
virtual instants; the plan ends when every one is delivered or dead (or at the horizon).
Nothing here touches a real store or provider, and when the dispatcher's policy changes the
plans change with it: there is no second model of it to keep in step.

It runs its own event loop: call it from a thread (``asyncio.to_thread``) when a loop runs.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.core.clock import Clock
from engine.core.domain import BucketKey, BucketScope, Limit
from engine.core.errors import ConfigError, NotFound
from engine.dispatch.directory import Directory
from engine.dispatch.dispatcher import Dispatcher, DispatcherSettings
from engine.limits.local_limiter import LocalLimiter
from engine.planning.memory_store import MemoryConfig, PlanLedger, PlanStore
from engine.planning.model import LimitChange, PlanResult, ProviderModel, ProviderPlan, TenantPlan
from engine.planning.virtual_loop import LoopClock, run_virtual
from engine.providers.base import Provider, ProviderConfig, ProviderFactory
from engine.providers.simulated import SimulatedProvider
from engine.store import Completion
from engine.store.records import PairLimit, ProviderRecord, TenantRecord
from engine.telemetry.figures import Telemetry, percentile

__all__ = ["DEFAULT_HORIZON_S", "Arrival", "PlanSetup", "run_plan"]

DEFAULT_HORIZON_S = 7 * 86_400.0  # a plan stops after a week of virtual time
_SERIES_POINTS = 240  # points of each tenant's depth curve
_IDLE_POLL_S = 3600.0


@dataclass(frozen=True, slots=True)
class Arrival:
    """``count`` notifications of one key enqueued ``at_s`` seconds after the start."""

    at_s: float
    tenant_id: int
    provider_id: int
    count: int = 1
    priority: int = 0
    ttl_s: float | None = None  # each never sent later than this after it arrives


@dataclass(frozen=True, slots=True)
class PlanSetup:
    """Everything a plan runs with: the configuration (limits included), how each provider
    answers (``models`` by provider name), the dispatcher's settings and the attempt budget."""

    tenants: tuple[TenantRecord, ...]
    providers: tuple[ProviderRecord, ...]
    pairs: tuple[PairLimit, ...]
    models: Mapping[str, ProviderModel]
    dispatch: DispatcherSettings
    max_attempts: int

    @property
    def concurrency(self) -> int:
        return self.dispatch.concurrency

    def limits(self) -> tuple[tuple[str, Limit], ...]:
        """Every configured bucket and its limit, by name."""
        found = [(str(BucketKey.for_tenant(t.name)), t.limit) for t in self.tenants]
        found += [(str(BucketKey.for_provider(p.name)), p.limit) for p in self.providers]
        found += [(str(BucketKey.for_pair(p.tenant, p.provider)), p.limit) for p in self.pairs]
        return tuple(sorted((name, limit) for name, limit in found if limit is not None))

    def with_changes(
        self, changes: Sequence[LimitChange], *, concurrency: int | None = None
    ) -> PlanSetup:
        """This setup with ``changes`` applied; raises NotFound for a name that is not
        configured and ConfigError for a concurrency below 1."""
        tenants = {t.name: t for t in self.tenants}
        providers = {p.name: p for p in self.providers}
        pairs = {(p.tenant, p.provider): p for p in self.pairs}
        for change in changes:
            key = change.key
            if key.scope is not BucketScope.PROVIDER and key.tenant not in tenants:
                raise NotFound(f"{change}: no tenant named {key.tenant!r}.")
            if key.scope is not BucketScope.TENANT and key.provider not in providers:
                raise NotFound(f"{change}: no provider named {key.provider!r}.")
            if key.scope is BucketScope.TENANT:
                t = tenants[key.tenant]
                tenants[key.tenant] = dataclasses.replace(t, limit=change.limit(t.limit))
            elif key.scope is BucketScope.PROVIDER:
                p = providers[key.provider]
                providers[key.provider] = dataclasses.replace(p, limit=change.limit(p.limit))
            else:
                old = pairs.get((key.tenant, key.provider))
                limit = change.limit(old.limit if old is not None else None)
                if limit is None:
                    pairs.pop((key.tenant, key.provider), None)
                else:
                    pairs[key.tenant, key.provider] = PairLimit(
                        tenants[key.tenant].id,
                        providers[key.provider].id,
                        key.tenant,
                        key.provider,
                        limit,
                    )
        dispatch = self.dispatch
        if concurrency is not None:
            if concurrency < 1:
                raise ConfigError(f"concurrency must be at least 1, not {concurrency}.")
            dispatch = dataclasses.replace(dispatch, concurrency=concurrency)
        return dataclasses.replace(
            self,
            tenants=tuple(tenants.values()),
            providers=tuple(providers.values()),
            pairs=tuple(pairs.values()),
            dispatch=dispatch,
        )


def _held_by(limiter: LocalLimiter, limits: Mapping[BucketKey, Limit]) -> dict[str, dict[str, int]]:
    """Per tenant name, how often each bucket (by name) held its reservations short (of
    several empty at once, the slowest to refill), from a limiter made with ``count_short``."""
    found: dict[str, dict[str, int]] = {}
    for (first, held), count in limiter.shorts().items():
        if not held:
            continue
        slowest = min(held, key=lambda key: _rate(limits, key))
        counts = found.setdefault(first.tenant, {})  # ``for_send`` puts the tenant's key first
        counts[str(slowest)] = counts.get(str(slowest), 0) + count
    return found


class _Untallied(Telemetry):
    """Telemetry nobody reads: a plan's figures come from its ledger. The dispatcher reports
    to it as to any other (what it reports decides nothing), at no cost per send."""

    def completed(
        self,
        completion: Completion,
        tenants: Mapping[int, TenantRecord],
        providers: Mapping[int, ProviderRecord],
    ) -> None:
        pass

    def observe_send(self, provider: str, duration_s: float) -> None:
        pass


def _rate(limits: Mapping[BucketKey, Limit], key: BucketKey) -> float:
    limit = limits.get(key)
    return limit.rate_per_s if limit is not None else 0.0  # a block: no refill at all


def run_plan(
    setup: PlanSetup,
    arrivals: Sequence[Arrival],
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    seed: int = 0,
) -> PlanResult:
    """Plan ``arrivals`` (ascending ``at_s``) under ``setup``; the same inputs and ``seed``
    give the same plan. Runs an event loop of its own: not on a thread that runs one."""
    started = time.perf_counter()
    enabled = {t.id for t in setup.tenants if t.enabled}
    fed = [a for a in arrivals if a.tenant_id in enabled]
    ledger, short, end_s = run_virtual(lambda clock: _simulate(setup, fed, horizon_s, seed, clock))
    return _summarise(setup, arrivals, ledger, short, end_s, time.perf_counter() - started)


async def _simulate(
    setup: PlanSetup, arrivals: Sequence[Arrival], horizon_s: float, seed: int, clock: LoopClock
) -> tuple[PlanLedger, dict[str, dict[str, int]], float]:
    ledger = PlanLedger()
    config = MemoryConfig(setup.tenants, setup.providers, setup.pairs)
    store = PlanStore(config, ledger, max_attempts=setup.max_attempts)
    limiter = LocalLimiter(clock, count_short=True)  # which buckets paced each tenant
    kinds = {p.kind for p in setup.providers}
    factory = _simulated(setup.models, clock, seed)
    directory = Directory(store, limiter, dict.fromkeys(kinds, factory))
    await directory.refresh()
    # No other process enqueues or changes limits during a plan, and every arrival wakes the
    # dispatcher: it need not poll, which through an idle day would cost a wake-up a second.
    settings = dataclasses.replace(setup.dispatch, poll_s=_IDLE_POLL_S)
    dispatcher = Dispatcher(
        store,
        limiter,
        directory,
        _Untallied(clock),
        clock,
        owner="planner",
        settings=settings,
        rng=random.Random(seed),
    )
    running = asyncio.Event()
    running.set()
    dispatch = asyncio.create_task(dispatcher.run(running))
    side = [
        asyncio.create_task(dispatcher.complete_loop()),
        asyncio.create_task(_feed(store, ledger, dispatcher, clock, arrivals)),
    ]
    try:
        async with clock.timeout(horizon_s):
            await ledger.done.wait()
    except TimeoutError:
        pass
    end_s = clock.monotonic()
    dispatcher.stop_claiming()
    await dispatch
    await dispatcher.drain()
    for task in side:
        task.cancel()
    await asyncio.gather(*side, return_exceptions=True)
    await directory.aclose()
    return ledger, _held_by(limiter, directory.limits), end_s


def _simulated(models: Mapping[str, ProviderModel], clock: Clock, seed: int) -> ProviderFactory:
    def make(config: ProviderConfig) -> Provider:
        model = models.get(config.name, ProviderModel())
        return SimulatedProvider(
            config.name,
            latency_ms=model.latency_ms,
            latency_jitter_ms=model.jitter_ms,
            throttle_rate=model.throttle_rate,
            error_rate=model.error_rate,
            permanent_rate=model.permanent_rate,
            retry_after_s=model.retry_after_s,
            rng=random.Random(model.seed if model.seed is not None else f"{seed}/{config.name}"),
            clock=clock,
            batch_max=model.batch_max,
        )

    return make


async def _feed(
    store: PlanStore,
    ledger: PlanLedger,
    dispatcher: Dispatcher,
    clock: Clock,
    arrivals: Sequence[Arrival],
) -> None:
    """Enqueue each arrival at its instant and wake the dispatcher, as a local enqueue does."""
    for arrival in arrivals:
        wait_s = arrival.at_s - clock.monotonic()
        if wait_s > 0:
            dispatcher.wake()  # the arrivals so far, before sleeping until the next
            await clock.sleep(wait_s)
        store.queue.add(
            arrival.tenant_id,
            arrival.provider_id,
            arrival.count,
            now=clock.monotonic(),
            priority=arrival.priority,
            ttl_s=arrival.ttl_s,
        )
    dispatcher.wake()
    ledger.feeding_ended()


# -- the report --------------------------------------------------------------------------------


def _summarise(
    setup: PlanSetup,
    arrivals: Sequence[Arrival],
    ledger: PlanLedger,
    short: Mapping[str, Mapping[str, int]],
    end_s: float,
    planned_in_s: float,
) -> PlanResult:
    planned: dict[int, int] = {}
    for a in arrivals:
        planned[a.tenant_id] = planned.get(a.tenant_id, 0) + a.count
    tenants = {t.id: t for t in setup.tenants}
    latency_s = {name: m.latency_ms / 1000 for name, m in setup.models.items()}
    slowest_s = max(latency_s.values(), default=0.0)
    rows: list[TenantPlan] = []
    unfinished = 0
    for tenant_id, count in sorted(planned.items(), key=lambda item: tenants[item[0]].name):
        record = tenants[tenant_id]
        tally = ledger.tenant(tenant_id)
        left = count - tally.delivered - tally.dead - tally.expired
        unfinished += left
        waits = sorted(tally.waits)
        p95 = percentile(waits, 95)
        paced_by = _paced_by(short.get(record.name, {}), p95, slowest_s)
        rows.append(
            TenantPlan(
                tenant=record.name,
                notifications=count,
                delivered=tally.delivered,
                dead=tally.dead,
                sends=tally.sends,
                drain_s=tally.last_finished_at if left == 0 else None,
                wait_p50_s=percentile(waits, 50),
                wait_p95_s=p95,
                wait_p99_s=percentile(waits, 99),
                max_queued=tally.max_depth,
                paced_by=paced_by if record.enabled else "disabled",
                depth=_resample(tally.series, end_s),
                expired=tally.expired,
            )
        )
    drains = [t.drain_s for t in rows]
    total = None if None in drains else max((d for d in drains if d is not None), default=0.0)
    return PlanResult(
        concurrency=setup.concurrency,
        limits=setup.limits(),
        tenants=tuple(rows),
        providers=_providers(setup, ledger),
        total_drain_s=total,
        notifications=sum(planned.values()),
        unfinished=unfinished,
        planned_in_s=planned_in_s,
    )


def _paced_by(short: Mapping[str, int], wait_p95_s: float | None, latency_s: float) -> str:
    """The bucket that held the tenant's reservations short most often; with none, the
    senders (its notifications waited well beyond a send) or nothing (they went as they
    came)."""
    if short:
        return max(sorted(short), key=lambda name: short[name])
    if wait_p95_s is not None and wait_p95_s > 2 * latency_s + 0.05:
        return "concurrency"
    return "arrivals"


def _providers(setup: PlanSetup, ledger: PlanLedger) -> tuple[ProviderPlan, ...]:
    found = []
    for record in sorted(setup.providers, key=lambda p: p.name):
        tally = ledger.providers.get(record.id)
        if tally is None:
            continue
        busy_s = (tally.last_send_at or 0.0) - (tally.first_send_at or 0.0)
        rate = tally.sends / busy_s if busy_s > 0 else 0.0
        limit = record.limit
        found.append(
            ProviderPlan(
                provider=record.name,
                sends=tally.sends,
                rate_per_s=rate,
                limit=limit,
                utilisation=rate / limit.rate_per_s if limit is not None and rate else None,
                model=setup.models.get(record.name, ProviderModel()),
            )
        )
    return tuple(found)


def _resample(series: Sequence[tuple[float, int]], end_s: float) -> tuple[tuple[float, int], ...]:
    """The depth curve at ``_SERIES_POINTS`` even instants from 0 to ``end_s`` (each the depth
    right after the last change at or before it), with the peak kept where it falls."""
    if not series:
        return ()
    times = [t for t, _ in series]
    step = end_s / (_SERIES_POINTS - 1) if end_s > 0 else 0.0
    points = []
    for i in range(_SERIES_POINTS if step else 1):
        at = i * step
        index = bisect.bisect_right(times, at) - 1
        points.append((at, series[index][1] if index >= 0 else 0))
    peak_at, peak = max(series, key=lambda point: point[1])
    points.append((peak_at, peak))
    points.sort()
    return tuple(points)
