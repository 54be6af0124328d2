"""The engine's retention: the windows every process applies, pruning when asked, and the
prune chore that runs in the background."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable

from engine.core.errors import OmniPostError
from engine.core.retention import PruneReport, Retention
from engine.facade.parts import EngineParts
from engine.store import StoreSize

__all__ = ["RetentionPart"]

log = logging.getLogger("engine.facade.engine")  # where these lines were logged before the split

_PRUNE = "prune"  # the chore lease's name


class RetentionPart(EngineParts):
    async def retention(self) -> Retention:
        """The store's retention windows, as every process sharing the store applies them."""
        return await self.store.maintenance.retention()

    async def retention_set(self, **ages: float | None) -> Retention:
        """Change some windows (``delivered_s``, ``dead_s``, ``log_s``, ``audit_s``,
        ``suppressions_s``; ``None`` keeps forever) for every process; audited. Raises
        ConfigError for a bad age or name."""
        retention = (await self.retention()).changed(**ages)
        await self.store.maintenance.retention_set(
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

    async def store_size(self) -> StoreSize:
        return await self.store.maintenance.size()

    async def pruned_at(self) -> float | None:
        """When a prune pass (in the background or asked for) last finished, or None."""
        return await self.store.maintenance.chore_last_run(_PRUNE)

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
                "pruned %d delivered, %d dead, %d cancelled, %d delivery-log and %d audit rows%s",
                report.delivered,
                report.dead,
                report.cancelled,
                report.delivery_log,
                report.audit_log,
                "" if report.complete else " (more next time)",
            )
