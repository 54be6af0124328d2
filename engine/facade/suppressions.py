"""Each tenant's suppression list: looked at, added to (by hand or from a list kept elsewhere)
and taken from. A provider's own answers add to it as notifications complete
(``engine.store.suppressions``); a notification enqueued to a recipient on it is ``suppressed``,
never sent. Every change an operator makes is audited, never with the recipients."""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.domain import check_recipient_and_key
from engine.core.errors import ConfigError
from engine.facade.parts import EngineParts
from engine.store import SuppressionRecord
from engine.store.suppressions import REASON_MAX

__all__ = ["MAX_SUPPRESSION_PAGE", "SuppressionsPart"]

MAX_SUPPRESSION_PAGE = 1000


class SuppressionsPart(EngineParts):
    async def suppressions(
        self,
        tenant: str,
        *,
        provider: str | None = None,
        limit: int = 100,
        before: int | None = None,
    ) -> list[SuppressionRecord]:
        """``tenant``'s suppressed recipients (masked), newest first, ``limit`` of them (1 to
        ``MAX_SUPPRESSION_PAGE``), only ``provider``'s if given, and those older than the id
        ``before`` (the last id of the page before). NotFound for an unknown tenant or
        provider."""
        if not 1 <= limit <= MAX_SUPPRESSION_PAGE:
            raise ConfigError(f"the limit must be 1 to {MAX_SUPPRESSION_PAGE}.")
        tenant_id, provider_id = await self._ids(tenant, provider)
        return await self.store.suppressions.listing(
            tenant_id, provider_id=provider_id or None, limit=limit, before_id=before
        )

    async def suppression_add(
        self, tenant: str, provider: str, recipients: Sequence[str], *, reason: str = ""
    ) -> int:
        """``suppression_add_counts``' first count: how many recipients were not on the list."""
        return (await self.suppression_add_counts(tenant, provider, recipients, reason=reason))[0]

    async def suppression_add_counts(
        self, tenant: str, provider: str, recipients: Sequence[str], *, reason: str = ""
    ) -> tuple[int, int]:
        """Put ``recipients`` on ``tenant``'s list for ``provider`` (all or none), then
        suppress the tenant's notifications for the provider already queued to them (never
        sent; each page of the queue read once). Returns how many recipients were not on the
        list already, and how many queued notifications were suppressed. ConfigError for an
        empty or invalid recipient or a reason that is not one printable line; NotFound for an
        unknown tenant or provider."""
        for recipient in recipients:
            check_recipient_and_key(recipient, None)
        reason = reason.strip()
        if len(reason) > REASON_MAX or not reason.isprintable():
            raise ConfigError(f"a reason is one printable line of at most {REASON_MAX} characters.")
        tenant_id, provider_id = await self._ids(tenant, provider)
        now = self.clock.wall()
        added = await self.store.suppressions.add(
            tenant_id,
            provider_id,
            recipients,
            reason=reason,
            provider=provider,
            now=now,
            actor=self.actor,
        )
        queued = await self.store.suppressions.suppress_queued(
            tenant_id, provider_id, recipients, now=now
        )
        if queued:
            self.telemetry.count("suppressed", queued)
            detail = {"provider": provider, "suppressed": queued}
            await self.store.audit.write(
                self.actor, "notification.suppress", tenant_id, detail, now=now
            )
            # The dispatcher's book may count those rows as due: the look this asks for
            # corrects it (as after a cancel).
            self.dispatcher.wake()
        return added, queued

    async def suppression_remove_ids(self, tenant: str, ids: Sequence[int]) -> int:
        """Take ``tenant``'s entries ``ids`` (as listed) off its list; an id that is not the
        tenant's is left alone. Returns how many were taken off. NotFound for an unknown
        tenant."""
        tenant_id, _ = await self._ids(tenant)
        if not ids:
            return 0
        return await self.store.suppressions.remove_ids(
            tenant_id, list(dict.fromkeys(ids)), now=self.clock.wall(), actor=self.actor
        )

    async def suppression_remove(self, tenant: str, provider: str, recipient: str) -> None:
        """Take ``recipient`` off ``tenant``'s list for ``provider``: later notifications to it
        are sent again. NotFound when it is not on the list (or no such tenant or provider)."""
        check_recipient_and_key(recipient, None)
        tenant_id, provider_id = await self._ids(tenant, provider)
        await self.store.suppressions.remove(
            tenant_id,
            provider_id,
            recipient,
            provider=provider,
            now=self.clock.wall(),
            actor=self.actor,
        )
