"""The console's calls for tenants' API keys: list, create (the key shown once), revoke."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal

from ui.command import command
from ui.sampler import Sampler

__all__ = ["KeyCommands"]


class KeyCommands(Sampler):
    api_keys_loaded = Signal(object)  # list[ApiKeyRecord] of the tenant asked for ("" every one)
    api_key_created = Signal(object, str)  # ApiKeyRecord, the key itself: shown once, kept nowhere

    @command
    async def load_api_keys(self, tenant: str = "") -> None:
        """Send ``tenant``'s keys (every tenant's with ``""``) on ``api_keys_loaded``."""
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant or None))

    @command
    async def create_api_key(self, tenant: str, name: str, scope: Sequence[str]) -> None:
        """Make a key (audited: the log panel shows it); the key goes out once, on
        ``api_key_created``."""
        record, key = await self._engine.create_api_key(tenant, name=name, scope=scope)
        self.api_key_created.emit(record, key)
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant))

    @command
    async def revoke_api_key(self, key_id: int, tenant: str = "") -> None:
        """Revoke key ``key_id`` for good (audited), then list ``tenant``'s keys again."""
        await self._engine.revoke_api_key(key_id)  # the audit log, polled, tells the log panel
        self.api_keys_loaded.emit(await self._engine.api_keys(tenant or None))
