"""The engine's notifications: enqueue, look up, retry or discard dead ones, and test sends."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from engine.core.domain import (
    EnqueueItem,
    Message,
    NotificationState,
    SendResult,
    check_items,
)
from engine.core.errors import ConfigError, ItemRefused, NotFound
from engine.facade.parts import EngineParts
from engine.store import DeliveryEntry, EnqueueResult, NotificationRow, NotificationView

__all__ = ["TEST_PAYLOAD", "NotificationsPart"]

# What ``test_send`` sends when given no payload: every built-in kind finds its text in it (an
# email's subject and text, an SMS's body, a push's title and body).
TEST_PAYLOAD = {
    "subject": "OmniPost test",
    "text": "A test send from OmniPost.",
    "title": "OmniPost test",
    "body": "A test send from OmniPost.",
}


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
    ) -> EnqueueResult:
        """Queue one notification; with a key the tenant used before, return that one instead.
        A provider that is not configured is ``NotFound``, anything else refused a
        ``ConfigError``: one item has no index to name."""
        item = EnqueueItem(provider, recipient, payload or {}, key, priority)
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
        recipient, a key too long) and nothing is written. Each provider's name is looked up
        once, however many items name it."""
        tenant_id, _ = await self._ids(tenant)
        provider_ids: dict[str, int] = {}
        for index, item in enumerate(items):
            if item[0] not in provider_ids:
                provider_ids[item[0]] = await self._provider_of(tenant, index, item[0])
        check_items(items)
        without = sum(1 for i in items if i[3] is None)
        made_up = iter(new_keys(without))
        max_attempts = self.settings.max_attempts
        rows = [
            NotificationRow(
                provider_ids[provider],
                recipient,
                payload,
                next(made_up) if key is None else key,
                priority,
                max_attempts,
            )
            for provider, recipient, payload, key, priority in items
        ]
        results = await self.store.queue.enqueue(
            tenant_id, rows, now=self.clock.wall(), made_up=without == len(items)
        )
        due: dict[tuple[int, int], int] = {}
        for row, result in zip(rows, results, strict=True):
            if result.suppressed:
                self.telemetry.count("suppressed")
            elif not result.duplicate:
                due_key = (tenant_id, row.provider_id)
                due[due_key] = due.get(due_key, 0) + 1
        self.dispatcher.enqueued(due)
        return results

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
        return await self.store.queue.list_by_tenant(tenant_id, state=state, limit=limit)

    async def deliveries(self, tenant: str, *, limit: int = 100) -> list[DeliveryEntry]:
        """The tenant's newest send attempts (the delivery log), newest first."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.queue.deliveries(tenant_id, limit=limit)

    async def dead(
        self, tenant: str | None = None, *, limit: int = 1000
    ) -> list[tuple[str, NotificationView]]:
        """Dead notifications as (tenant name, view), of one tenant or of every tenant."""
        found: list[tuple[str, NotificationView]] = []
        for name in await self._tenant_names(tenant):
            rows = await self.notifications(name, state=NotificationState.DEAD, limit=limit)
            found.extend((name, row) for row in rows)
        return found

    async def retry_dead(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        """Queue dead notifications again; ``ids=None`` means every dead one (of ``tenant``).
        Returns how many were queued again (see ``retry_dead_counts``)."""
        return (await self.retry_dead_counts(ids, tenant=tenant))[0]

    async def retry_dead_counts(
        self, ids: Sequence[int] | None, *, tenant: str | None = None
    ) -> tuple[int, int]:
        """``retry_dead``: how many were queued again, and how many became ``suppressed``
        instead because their recipient is on the tenant's suppression list for their
        provider (never sent)."""
        return await self._repair("dead.retry", ids, tenant)

    async def discard_dead(self, ids: Sequence[int] | None, *, tenant: str | None = None) -> int:
        return (await self._repair("dead.discard", ids, tenant))[0]

    async def cancel(self, tenant: str, notification_id: int) -> NotificationView:
        """Cancel the tenant's queued notification ``notification_id``: it is finished now,
        never to be sent; audited. Returns it as it is now. Raises ``NotFound`` when the
        tenant has no such notification (or no such tenant), ``NotCancellable`` (a
        ``Conflict``, with its ``state``) when it is not queued."""
        tenant_id, _ = await self._ids(tenant)
        now = self.clock.wall()
        view = await self.store.queue.cancel(tenant_id, notification_id, now=now)
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
                count, suppressed = await self.store.queue.retry_dead_counts(
                    tenant_id, ids, now=now
                )
            else:
                count = await self.store.queue.discard_dead(tenant_id, ids)
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
            payload=payload or dict(TEST_PAYLOAD),
            idempotency_key=f"test-{uuid.uuid4().hex}",
            attempt=1,
        )
        return await instance.send(message)
