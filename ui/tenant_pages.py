"""The console's reads of tenants a page at a time: one page of the Tenants & limits table
(filtered by name and sorted in the store, ``Engine.tenant_page``) and one tenant's pair
limits, so that a store of 100,000 tenants is never read whole for a table."""

from __future__ import annotations

from PySide6.QtCore import Signal

from engine import NotFound, TenantQuery
from ui.api_keys_bridge import ApiKeyCommands
from ui.command import command

__all__ = ["TenantPageCommands"]


class TenantPageCommands(ApiKeyCommands):
    tenant_page_loaded = Signal(object)  # TenantPage: its ``query`` says which page it is
    pairs_loaded = Signal(str, object)  # tenant, list[PairLimit] (empty: none, or no tenant)

    @command
    async def load_tenant_page(self, query: TenantQuery) -> None:
        """Send the page ``query`` asks for on ``tenant_page_loaded``."""
        self.tenant_page_loaded.emit(await self._engine.tenant_page(query))

    @command
    async def load_pairs(self, tenant: str) -> None:
        """Send ``tenant``'s limits on particular providers on ``pairs_loaded`` (none for a
        name that is no tenant: the form is being typed in)."""
        try:
            pairs = await self._engine.pair_limits_of(tenant)
        except NotFound:
            pairs = []
        self.pairs_loaded.emit(tenant, pairs)
