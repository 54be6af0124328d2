"""The console's calls for tenants' suppression lists: list, add (typed or from a file), remove."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal

from ui.command import command
from ui.tenant_pages import TenantPageCommands

__all__ = ["SuppressionCommands"]

SHOWN = 1000  # entries listed at once, newest first


class SuppressionCommands(TenantPageCommands):
    suppressions_loaded = Signal(str, object)  # tenant, list[SuppressionRecord] (masked)
    suppressions_changed = Signal(str)  # what a change did, one sentence

    @command
    async def load_suppressions(self, tenant: str, provider: str = "") -> None:
        """Send ``tenant``'s newest entries (only ``provider``'s if given) on
        ``suppressions_loaded``."""
        await self._send_suppressions(tenant, provider)

    async def _send_suppressions(self, tenant: str, provider: str) -> None:
        found = await self._engine.suppressions(tenant, provider=provider or None, limit=SHOWN)
        self.suppressions_loaded.emit(tenant, found)

    @command
    async def suppress(
        self, tenant: str, provider: str, recipients: Sequence[str], reason: str, shown: str = ""
    ) -> None:
        """Put ``recipients`` on ``tenant``'s list for ``provider`` (audited; what the tenant
        had queued to them is suppressed too), then list the entries again (``shown``: the
        provider the view filters on)."""
        added, queued = await self._engine.suppression_add_counts(
            tenant, provider, list(recipients), reason=reason
        )
        known = len(set(recipients)) - added
        also = f" ({known} already were)" if known else ""
        held = (
            f" {queued} notification{'' if queued == 1 else 's'} queued to them will not be sent."
            if queued
            else ""
        )
        self.suppressions_changed.emit(
            f"Suppressed {added} recipient{'' if added == 1 else 's'} of {tenant} for"
            f" {provider}{also}.{held}"
        )
        await self._send_suppressions(tenant, shown)

    @command
    async def suppression_remove_ids(
        self, tenant: str, ids: Sequence[int], shown: str = ""
    ) -> None:
        """Take ``tenant``'s entries ``ids`` off its list (audited), then list them again."""
        removed = await self._engine.suppression_remove_ids(tenant, list(ids))
        self.suppressions_changed.emit(
            f"Removed {removed} entr{'y' if removed == 1 else 'ies'} from {tenant}'s list: "
            "notifications to them are sent again."
        )
        await self._send_suppressions(tenant, shown)
