"""The engine's notifications: enqueue, look up, retry or discard dead ones, and test sends."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine.core.domain import (
    EnqueueItem,
    NotificationState,
    check_items,
)
from engine.core.errors import ConfigError, ItemRefused, NotFound, OmniPostError
from engine.core.lifetime import Lifetime, lifetimes
from engine.facade.parts import EngineParts
from engine.providers.schema import DEFAULT_TTL_OPTION
from engine.store import DeliveryEntry, EnqueueResult, NotificationRow, NotificationView
from engine.store.lifetimes import SWEEP_PART

__all__ = ["NotificationsPart"]


log = logging.getLogger(__name__)

_SWEEP_PARTS = 20  # parts of ``SWEEP_PART`` rows each sweep may promote, and expire, at most
# Rows due together are counted (up to ``_LEAD_CAP``) once their time is this near, so that the
# sweep starts queueing them early enough to be done by then: ``1.5 * rows / rate`` ahead, the
# rate as measured (``_FIRST_PER_S`` until a promotion of a whole part was timed), at most
# this far ahead.
_LEAD_HORIZON_S = 60.0
_LEAD_CAP = 1_000_000
_FIRST_PER_S = 5_000.0

# A made-up key is a version 7 UUID (RFC 9562) in hex: the time in milliseconds, then 74
# random bits. Its random bits' places, and its version and variant:
_KEY_MASK = b"\x00" * 6 + b"\x0f\xff\x3f" + b"\xff" * 7
_KEY_BITS = b"\x70\x00\x80" + b"\x00" * 7


def new_keys(n: int) -> list[str]:
    """``n`` idempotency keys for notifications given none, as ``uuid.UUID(...).hex`` writes a
    version 7 UUID: keys made later sort after (by the millisecond), so the store's unique
    index on (tenant, key) grows at its end instead of at a random page a row, as random
    (version 4) keys made it (less for Postgres to write and keep cached: bench/http_api.py's
    batches spent a few percent less of the machine in Postgres). Made from one read of the
    system's random source (a fifth of the time, paid per row)."""
    fixed = (time.time_ns() // 1_000_000).to_bytes(6) + _KEY_BITS
    bits = int.from_bytes(os.urandom(16 * n)) & int.from_bytes(_KEY_MASK * n)
    text = (bits | int.from_bytes(fixed * n)).to_bytes(16 * n).hex()
    return [text[start : start + 32] for start in range(0, 32 * n, 32)]


class NotificationsPart(EngineParts):
    async def enqueue(
        self,
        tenant: str,
        provider: str,
        recipient: str,
        payload: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        priority: int = 0,
        send_at: float | None = None,
        expires_at: float | None = None,
        ttl_s: float | None = None,
    ) -> EnqueueResult:
        """Queue one notification; with a key the tenant used before, return that one instead.
        ``send_at`` (unix s): not before then (``scheduled`` until it falls due); ``expires_at``
        or ``ttl_s`` (from its send time): never sent after then (``expired`` instead). A
        provider that is not configured is ``NotFound``, anything else refused a
        ``ConfigError``: one item has no index to name."""
        item = EnqueueItem(
            provider, recipient, payload or {}, key, priority, send_at, expires_at, ttl_s
        )
        try:
            results = await self.enqueue_many(tenant, [item])
        except ItemRefused as refused:
            raise (NotFound if refused.field == "provider" else ConfigError)(
                refused.reason
            ) from None
        return results[0]

    async def enqueue_many(self, tenant: str, items: Sequence[EnqueueItem]) -> list[EnqueueResult]:
        """Queue ``items`` of one tenant together, all or none: ``ItemRefused`` names the
        first item refused (its index and field: a provider that is not configured, an empty
        recipient, a key too long, a send time too far ahead, a deadline before the send
        time) and nothing is written. Each provider's name is looked up once, however many
        items name it. Times are resolved as ``engine.core.lifetime`` says."""
        tenant_id, _ = await self._ids(tenant)
        provider_ids: dict[str, int] = {}
        for index, item in enumerate(items):
            if item[0] not in provider_ids:
                provider_ids[item[0]] = await self._provider_of(tenant, index, item[0])
        check_items(items)
        now = self.clock.wall()
        times = lifetimes(
            items,
            now,
            most_ahead_s=self.settings.most_ahead_s,
            default_ttl_s=self._default_ttl(tenant_id, provider_ids),
        )
        without = sum(1 for i in items if i[3] is None)
        made_up = iter(new_keys(without))
        max_attempts = self.settings.max_attempts
        rows = [
            NotificationRow(
                provider_ids[item[0]],
                item[1],
                item[2],
                next(made_up) if item[3] is None else item[3],
                item[4],
                max_attempts,
            )
            for item in items
        ]
        if times is not None:
            for row, (send_at, expires_at) in zip(rows, times, strict=True):
                row.available_at, row.expires_at = send_at, expires_at
                row.scheduled = send_at is not None
            self._lifetimes_changed(times)
        results = await self.store.queue.enqueue(
            tenant_id, rows, now=now, made_up=without == len(items)
        )
        due: dict[tuple[int, int], int] = {}
        for row, result in zip(rows, results, strict=True):
            if result.suppressed:
                self.telemetry.count("suppressed")
            elif not (result.duplicate or row.scheduled):
                due_key = (tenant_id, row.provider_id)
                due[due_key] = due.get(due_key, 0) + 1
        self.dispatcher.enqueued(due)
        return results

    def _default_ttl(
        self, tenant_id: int, provider_ids: dict[str, int]
    ) -> Callable[[str], float | None]:
        """The deadline, after its send time, of an item of the tenant's that names none, by
        its provider's name: the tenant's default, else the provider's (its ``default_ttl_s``
        option), else none."""
        record = self.directory.tenants.get(tenant_id)
        if record is not None and record.default_ttl_s is not None:
            ttl_s = record.default_ttl_s
            return lambda _provider: ttl_s
        providers = self.directory.providers

        def of_provider(name: str) -> float | None:
            found = providers.get(provider_ids[name])
            option = found.options.get(DEFAULT_TTL_OPTION) if found is not None else None
            return float(option) if option else None

        return of_provider

    async def lifetimes_sweep(self) -> None:
        """Queue the scheduled notifications that fall due within ``sweep_ahead_s`` (each
        claimable from its send time on: queued ahead, rows due together are in every
        worker's book when their second comes, not a promotion's length later; further ahead
        when many fall due together, ``_lead``), then expire the unclaimed ones past their
        deadline, a part at a time (the loop turns between parts), at most ``_SWEEP_PARTS``
        parts of each per call; the keys queued are counted into this dispatcher's book
        (other processes hear it through the store's notification). Then note when the next
        sweep has work (``_sweep_at``)."""
        ahead_s = self._sweep_lead_s
        began, queued = self.clock.monotonic(), 0
        for _part in range(_SWEEP_PARTS):
            promoted = await self.store.lifetimes.promote(self.clock.wall(), ahead_s=ahead_s)
            queued += promoted.total
            moved = promoted.total - promoted.expired
            if moved:
                self.telemetry.count("promoted", moved)
                self.dispatcher.enqueued(promoted.due)
                self.dispatcher.due_later(promoted.later)
            if promoted.expired:
                self.telemetry.count("expired", promoted.expired)
            if promoted.total < SWEEP_PART:
                break
            await asyncio.sleep(0)
        for _part in range(_SWEEP_PARTS):
            expired = await self.store.lifetimes.expire(self.clock.wall())
            if expired:
                self.telemetry.count("expired", expired)
            if expired < SWEEP_PART:
                break
            await asyncio.sleep(0)
        took_s = self.clock.monotonic() - began
        if queued >= SWEEP_PART and took_s > 0:  # a promotion long enough to time
            per_s = queued / took_s
            known = self._promote_per_s
            self._promote_per_s = (known + per_s) / 2 if known else per_s
        due, deadline = await self.store.lifetimes.next_times()
        soonest = [self.clock.wall() + self.settings.sweep_recheck_s]
        if due is not None:
            self._sweep_lead_s = await self._lead(due)
            soonest.append(due - self._sweep_lead_s)  # queued that far ahead
        if deadline is not None:
            soonest.append(deadline)
        self._sweep_at = min(soonest)

    async def _lead(self, due: float) -> float:
        """How far ahead of ``due`` (the next scheduled row's time) the sweep starts: at least
        ``sweep_ahead_s``; when that time is within ``_LEAD_HORIZON_S``, long enough to queue
        every row due within its second at the promotions' rate. 100,000 rows due in one
        second took Postgres longer than 2 s to queue (a part of 5,000 rows 0.1-0.35 s), and
        the tenants queued after their second started late, losing the refill past their
        burst meanwhile: every later send of theirs kept that lag (docs/benchmarks.md, 15)."""
        lead_s = self.settings.sweep_ahead_s
        if due - self.clock.wall() > _LEAD_HORIZON_S:
            return lead_s
        rows = await self.store.lifetimes.scheduled_by(due + 1.0, cap=_LEAD_CAP)
        needed_s = 1.5 * rows / (self._promote_per_s or _FIRST_PER_S)
        needed_s = needed_s if needed_s < _LEAD_HORIZON_S else _LEAD_HORIZON_S
        return needed_s if needed_s > lead_s else lead_s

    async def _sweep_loop(self) -> None:
        """``lifetimes_sweep`` whenever one has work: at ``_sweep_at`` when that is known to
        come within ``sweep_s``, else every ``sweep_s`` on the engine's clock it checks the time
        against ``_sweep_at`` (lowered by this engine's enqueues with a
        time and by other processes' notifications; read again at least every
        ``sweep_recheck_s``, for rows written by a process that tells nobody: a command on
        SQLite). A store hiccup is logged, not fatal."""
        while True:
            # Until the next known time, if it comes sooner than the next check.
            until_s = self._sweep_at - self.clock.wall()
            sweep_s = self.settings.sweep_s
            await self.clock.sleep(sweep_s if until_s >= sweep_s else max(0.05, until_s))
            if self.clock.wall() < self._sweep_at:
                continue
            try:
                await self.lifetimes_sweep()
            except OmniPostError as exc:
                log.warning("sweep of scheduled and expiring notifications: %s", exc.message)

    def _lifetimes_changed(self, resolved: Sequence[Lifetime]) -> None:
        """Rows with a send time or a deadline were enqueued here: the sweep looks at them by
        the soonest (a send time less ``sweep_ahead_s``, when they are queued)."""
        ahead_s = self._sweep_lead_s
        times = [at - ahead_s for at, _ in resolved if at is not None]
        times += [until for _, until in resolved if until is not None]
        soonest = min(times, default=None)
        if soonest is not None and soonest < self._sweep_at:
            self._sweep_at = soonest

    def _notified(self) -> None:
        """Another process enqueued, retried or promoted rows: dispatch and sweep look again."""
        self._sweep_at = -math.inf
        self.dispatcher.wake()

    async def _provider_of(self, tenant: str, index: int, name: str) -> int:
        """The id of the provider item ``index`` names; ``ItemRefused`` when there is none."""
        try:
            return (await self._ids(tenant, name))[1]
        except NotFound:
            raise ItemRefused(index, "provider", f"there is no provider named {name!r}.") from None

    async def notifications(
        self, tenant: str, *, state: NotificationState | None = None, limit: int = 100
    ) -> list[NotificationView]:
        tenant_id, _ = await self._ids(tenant)
        return await self.store.notifications.list_by_tenant(tenant_id, state=state, limit=limit)

    async def deliveries(self, tenant: str, *, limit: int = 100) -> list[DeliveryEntry]:
        """The tenant's newest send attempts (the delivery log), newest first."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.notifications.deliveries(tenant_id, limit=limit)

    async def dead(
        self, tenant: str | None = None, *, limit: int = 1000
    ) -> list[tuple[str, NotificationView]]:
        """Dead notifications as (tenant name, view), of one tenant or of every tenant."""
        found: list[tuple[str, NotificationView]] = []
        for name in await self._tenant_names(tenant):
            rows = await self.notifications(name, state=NotificationState.DEAD, limit=limit)
            found.extend((name, row) for row in rows)
        return found

    async def dead_retry(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        """Queue dead notifications again; ``ids=None`` means every dead one (of ``tenant``).
        Returns how many were queued again (see ``dead_retry_counts``)."""
        return (await self.dead_retry_counts(ids, tenant=tenant))[0]

    async def dead_retry_counts(
        self, ids: Sequence[int] | None, *, tenant: str | None = None
    ) -> tuple[int, int]:
        """``dead_retry``: how many were queued again, and how many became ``suppressed``
        instead because their recipient is on the tenant's suppression list for their
        provider (never sent)."""
        return await self._repair("dead.retry", ids, tenant)

    async def dead_discard(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        return (await self._repair("dead.discard", ids, tenant))[0]

    async def notification_cancel(self, tenant: str, notification_id: int) -> NotificationView:
        """Cancel the tenant's queued notification ``notification_id``: it is finished now,
        never to be sent; audited. Returns it as it is now. Raises ``NotFound`` when the
        tenant has no such notification (or no such tenant), ``NotCancellable`` (a
        ``Conflict``, with its ``state``) when it is not queued."""
        tenant_id, _ = await self._ids(tenant)
        now = self.clock.wall()
        view = await self.store.notifications.cancel(tenant_id, notification_id, now=now)
        detail = {"id": notification_id}
        await self.store.audit.write(self.actor, "notification.cancel", tenant_id, detail, now=now)
        # The dispatcher's book may count the row as due: the look this asks for corrects it
        # (until then, a claim for it leases nothing and the key is looked at alone).
        self.dispatcher.wake()
        return view

    async def _repair(
        self, action: str, ids: Sequence[int] | None, tenant: str | None
    ) -> tuple[int, int]:
        """(done, suppressed instead) over the tenants named; each tenant's audited."""
        total = suppressed_total = 0
        for name in await self._tenant_names(tenant):
            tenant_id, _ = await self._ids(name)
            now = self.clock.wall()
            suppressed = 0
            if action == "dead.retry":
                count, suppressed = await self.store.notifications.dead_retry_counts(
                    tenant_id, ids, now=now
                )
            else:
                count = await self.store.notifications.dead_discard(tenant_id, ids)
            if count or suppressed:
                detail: dict[str, object] = {
                    "count": count,
                    "ids": list(ids) if ids is not None else "all",
                }
                if suppressed:
                    detail["suppressed"] = suppressed
                await self.store.audit.write(self.actor, action, tenant_id, detail, now=now)
            total += count
            suppressed_total += suppressed
        self.dispatcher.wake()
        return total, suppressed_total

    async def _tenant_names(self, tenant: str | None) -> list[str]:
        """``[tenant]``, or every tenant's name when None."""
        if tenant is not None:
            return [tenant]
        return [t.name for t in await self.store.config.tenants()]
