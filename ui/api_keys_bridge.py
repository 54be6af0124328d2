"""The console's calls for tenants' API keys: list, create (the key shown once), revoke; and a
tenant's own API limits (its request limit per key and its queue cap), read and set."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal

from engine import Limit
from ui.command import command
from ui.sampler import Sampler

__all__ = ["ApiKeyCommands"]


class ApiKeyCommands(Sampler):
    api_keys_loaded = Signal(object)  # list[ApiKeyRecord] of the tenant asked for ("" every one)
    api_key_created = Signal(object, str)  # ApiKeyRecord, the key itself: shown once, kept nowhere
    api_limits_loaded = Signal(object)  # TenantRecord: its api_limit and max_queued (None: default)

    @command
    async def load_api_keys(self, tenant: str = "") -> None:
        """Send ``tenant``'s keys (every tenant's with ``""``) on ``api_keys_loaded``."""
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant or None))

    @command
    async def api_key_create(self, tenant: str, name: str, scope: Sequence[str]) -> None:
        """Make a key (audited: the log panel shows it); the key goes out once, on
        ``api_key_created``."""
        record, key = await self._engine.api_key_create(tenant, name=name, scope=scope)
        self.api_key_created.emit(record, key)
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant))

    @command
    async def api_key_revoke(self, key_id: int, tenant: str = "") -> None:
        """Revoke key ``key_id`` for good (audited), then list ``tenant``'s keys again."""
        await self._engine.api_key_revoke(key_id)  # the audit log, polled, tells the log panel
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant or None))

    @command
    async def load_api_limits(self, tenant: str) -> None:
        """Send ``tenant`` (its ``api_limit`` and ``max_queued``) on ``api_limits_loaded``."""
        self.api_limits_loaded.emit(await self._engine.tenant(tenant))

    @command
    async def set_api_limits(
        self, tenant: str, limit: Limit | None, max_queued: int | None
    ) -> None:
        """Set ``tenant``'s request limit per key and queue cap (``None``: the server's default;
        audited; ``omnipost serve`` reads it again within five seconds), then send it again."""
        record = await self._engine.tenant_update(tenant, api_limit=limit, max_queued=max_queued)
        self.api_limits_loaded.emit(record)
