"""The engine's what-if planning: read what a plan needs from the store, then plan.

A plan reads the configuration, the traffic (a burst as the simulator would enqueue it, the
backlog, or the enqueues of the last hours) and how the real providers answered recently, and
runs ``engine.planning.planner`` on a thread of its own: it writes nothing and calls no provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.core.domain import Outcome
from engine.core.errors import ConfigError, NotFound
from engine.facade.parts import EngineParts
from engine.planning.model import (
    BacklogTraffic,
    BurstTraffic,
    LimitChange,
    PlanReport,
    PlanResult,
    ProviderModel,
    ReplayTraffic,
    Traffic,
)
from engine.planning.simulate import schedule
from engine.providers.base import ProviderConfig
from engine.providers.simulated import KIND as SIMULATED
from engine.providers.simulated import SimulatedProvider
from engine.store import ProviderRecord, SendSample

if TYPE_CHECKING:  # the planner is loaded by the first plan: other commands start without it
    from engine.planning.planner import Arrival, PlanSetup

__all__ = ["MAX_PLANNED", "PlansPart"]

MAX_PLANNED = 2_000_000  # notifications in one plan
_SAMPLE = 5_000  # recent sends read to model the real providers
_MIN_OBSERVED = 20  # fewer sends of a provider than this, and its model is assumed


class PlansPart(EngineParts):
    async def plan(
        self,
        traffic: Traffic,
        *,
        changes: Sequence[LimitChange] = (),
        concurrency: int | None = None,
        seed: int = 0,
    ) -> PlanReport:
        """Plan ``traffic`` with the limits in force and, when ``changes`` or a
        ``concurrency`` are given, with them too. Raises NotFound for a tenant or provider
        that does not exist and ConfigError for traffic or limits that cannot be planned,
        before planning anything."""
        setup = await self.plan_setup()
        proposed = None
        if changes or concurrency is not None:
            proposed = setup.with_changes(changes, concurrency=concurrency)
        arrivals = await self._arrivals(traffic, setup, seed)
        current_plan, proposed_plan = await asyncio.to_thread(
            _plan_both, setup, proposed, arrivals, seed
        )
        return PlanReport(str(traffic), tuple(changes), current_plan, proposed_plan)

    async def plan_setup(self) -> PlanSetup:
        """What a plan runs with now: the store's configuration and limits, the live
        workers' concurrency (this engine's when none is live), the dispatcher's settings and
        a model of each provider."""
        tenants = await self.store.config.tenants()
        providers = await self.store.config.providers()
        pairs = await self.store.config.pair_limits()
        live = await self.store.workers.read(alive_since=self.clock.wall() - 15.0)
        running = sum(w.concurrency for w in live if w.state in ("running", "paused"))
        samples = await self.store.stats.recent_sends(_SAMPLE)
        dispatch = self.settings.dispatch
        concurrency = running or self.dispatcher.concurrency
        from engine.planning.planner import PlanSetup

        return PlanSetup(
            tenants=tuple(tenants),
            providers=tuple(providers),
            pairs=tuple(pairs),
            models={p.name: provider_model(p, samples) for p in providers},
            dispatch=dataclasses.replace(dispatch, concurrency=concurrency),
            max_attempts=self.settings.max_attempts,
        )

    async def _arrivals(self, traffic: Traffic, setup: PlanSetup, seed: int) -> list[Arrival]:
        if isinstance(traffic, BurstTraffic):
            return _burst(traffic, setup, seed)
        if isinstance(traffic, BacklogTraffic):
            return await self._backlog()
        return await self._replay(traffic)

    async def _backlog(self) -> list[Arrival]:
        """The backlog as arrivals: queued rows due at the start, scheduled ones at their
        send times, each with what is left of its deadline. A key none of whose queued rows
        has a deadline is planned from its count; the queued rows of the others one by one,
        in the order a claim takes them (which of them go before their deadline depends on
        what is ahead of them)."""
        backlog = await self.store.queue.backlog()
        timed = await self.store.lifetimes.timed_backlog(MAX_PLANNED + 1)
        _check_size(sum(backlog.values()) + sum(1 for row in timed if row[2]), "the backlog")
        from engine.planning.planner import Arrival

        now = self.clock.wall()
        arrivals: list[Arrival] = []
        ordered = sorted({(t, p) for t, p, scheduled, _at, _until in timed if not scheduled})
        for t, p, priority, until in await self.store.lifetimes.queued_in_order(
            ordered, MAX_PLANNED + 1
        ):
            backlog[t, p] -= 1
            ttl_s = None if until is None else until - now
            arrivals.append(Arrival(0.0, t, p, 1, priority, ttl_s))
        for t, p, scheduled, available_at, until in timed:
            if scheduled:
                at_s = max(0.0, available_at - now)
                ttl_s = None if until is None else until - now - at_s
                arrivals.append(Arrival(at_s, t, p, 1, ttl_s=ttl_s))
        # What is left of a key's count: its leased rows (and any queued since the reads).
        arrivals += [Arrival(0.0, t, p, n) for (t, p), n in sorted(backlog.items()) if n > 0]
        arrivals.sort(key=lambda a: a.at_s)  # stable: each key's rows stay in claim order
        return arrivals

    async def _replay(self, traffic: ReplayTraffic) -> list[Arrival]:
        since = self.clock.wall() - traffic.hours * 3600.0
        rows = await self.store.queue.enqueues_since(since, MAX_PLANNED + 1)
        _check_size(len(rows), f"the last {traffic.hours:g}h")
        # The replay starts with the window's first enqueue, not at its edge.
        first = rows[0].enqueued_at if rows else since
        from engine.planning.planner import Arrival

        return [
            Arrival(
                (r.enqueued_at - first) / traffic.speed, r.tenant_id, r.provider_id, 1, r.priority
            )
            for r in rows
        ]


def _plan_both(
    current: PlanSetup, proposed: PlanSetup | None, arrivals: Sequence[Arrival], seed: int
) -> tuple[PlanResult, PlanResult | None]:
    from engine.planning.planner import run_plan

    first = run_plan(current, arrivals, seed=seed)
    return first, (run_plan(proposed, arrivals, seed=seed) if proposed is not None else None)


def _burst(traffic: BurstTraffic, setup: PlanSetup, seed: int) -> list[Arrival]:
    tenants = {t.name: t.id for t in setup.tenants}
    providers = {p.name: p.id for p in setup.providers}
    for name in traffic.tenants:
        if name not in tenants:
            raise NotFound(f"no tenant named {name!r}.")
    if traffic.provider not in providers:
        raise NotFound(f"no provider named {traffic.provider!r}.")
    if traffic.count < 1:
        raise ConfigError(f"count must be at least 1, not {traffic.count}.")
    _check_size(traffic.count * len(traffic.tenants), "the burst")
    offsets = schedule(traffic.pattern, traffic.count, traffic.duration_s, random.Random(seed))
    provider_id = providers[traffic.provider]
    from engine.planning.planner import Arrival

    arrivals: list[Arrival] = []
    for at_s, count in _runs(offsets):
        arrivals.extend(
            Arrival(at_s, tenants[name], provider_id, count, ttl_s=traffic.ttl_s)
            for name in traffic.tenants
        )
    return arrivals


def _runs(offsets: Sequence[float]) -> list[tuple[float, int]]:
    """Equal offsets (ascending) as (offset, how many)."""
    runs: list[tuple[float, int]] = []
    for at_s in offsets:
        if runs and runs[-1][0] == at_s:
            runs[-1] = (at_s, runs[-1][1] + 1)
        else:
            runs.append((at_s, 1))
    return runs


def _check_size(n: int, what: str) -> None:
    if n > MAX_PLANNED:
        raise ConfigError(
            f"{what} holds more than {MAX_PLANNED:,} notifications; plan a smaller part of it."
        )


def provider_model(record: ProviderRecord, samples: Sequence[SendSample]) -> ProviderModel:
    """How ``record`` answers in a plan: a simulated provider as its options say; a real one
    as its recent sends in ``samples`` did (latency from the provider's own time, chances
    from the outcomes), or, with too few of them, 5 ms and always delivered."""
    if record.kind == SIMULATED:
        sim = SimulatedProvider.from_config(
            ProviderConfig(record.name, record.kind, record.options)
        )
        return ProviderModel(
            latency_ms=sim.latency_ms,
            jitter_ms=sim.latency_jitter_ms,
            throttle_rate=sim.throttle_rate,
            error_rate=sim.error_rate,
            permanent_rate=sim.permanent_rate,
            retry_after_s=sim.retry_after_s,
            seed=sim.seed,
            source="options",
            batch_max=sim.batch_max,
        )
    mine = [s for s in samples if s.provider_id == record.id]
    if len(mine) < _MIN_OBSERVED:
        return ProviderModel(
            source=f"assumed (only {len(mine)} recent sends observed): 5 ms, all delivered",
            batch_max=_batch_max(record),
        )
    outcomes = [s.outcome for s in mine]
    timed = [s.send_s for s in mine if s.send_s is not None]
    mean_s = statistics.fmean(timed) if timed else 0.005
    # A uniform latency with the same spread: its half-width is sqrt(3) standard deviations.
    spread_s = math.sqrt(3.0) * statistics.pstdev(timed) if len(timed) > 1 else 0.0
    share = len(outcomes)
    return ProviderModel(
        latency_ms=mean_s * 1000.0,
        jitter_ms=min(spread_s, mean_s) * 1000.0,
        throttle_rate=outcomes.count(Outcome.THROTTLED) / share,
        error_rate=(outcomes.count(Outcome.TRANSIENT) + outcomes.count(Outcome.UNAVAILABLE))
        / share,
        permanent_rate=outcomes.count(Outcome.PERMANENT) / share,
        source=f"observed ({share} recent sends)",
        batch_max=_batch_max(record),
    )


def _batch_max(record: ProviderRecord) -> int:
    """The ``batch_max`` option of a provider whose kind takes one (saved options are valid)."""
    value = record.options.get("batch_max", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1
