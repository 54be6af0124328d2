"""The console's calls for tenants' endpoints of status events: list them with their outbox,
add one (its secret sent once), remove, rotate the secret, enable and disable, post a test
event, replay past events, and list an endpoint's recent events with what each try answered."""

from __future__ import annotations

from PySide6.QtCore import Signal

from ui.command import command
from ui.suppression_bridge import SuppressionCommands

__all__ = ["WebhookCommands"]

RECENT = 100  # an endpoint's events listed at once, newest first


class WebhookCommands(SuppressionCommands):
    webhooks_loaded = Signal(str, object)  # tenant, list[EndpointView]
    webhook_events_loaded = Signal(str, int, object)  # tenant, endpoint id, list[EventRow]
    webhook_secret = Signal(object, str)  # EndpointRecord, its new secret: shown once
    webhooks_changed = Signal(str)  # what a change or a test did, one sentence

    @command
    async def load_webhooks(self, tenant: str) -> None:
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))

    @command
    async def load_webhook_events(self, tenant: str, endpoint_id: int) -> None:
        found = await self._engine.webhook_events(tenant, endpoint_id=endpoint_id, limit=RECENT)
        self.webhook_events_loaded.emit(tenant, endpoint_id, found)

    @command
    async def webhook_add(
        self, tenant: str, url: str, events: list[str] | None, allow_private: bool
    ) -> None:
        """Subscribe ``url`` (audited); its secret goes out once, on ``webhook_secret``."""
        made = await self._engine.webhook_add(
            tenant, url, events=events, allow_private=allow_private
        )
        self.webhook_secret.emit(made.endpoint, made.secret)
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))

    @command
    async def webhook_remove(self, tenant: str, endpoint_id: int) -> None:
        await self._engine.webhook_remove(tenant, endpoint_id)
        self.webhooks_changed.emit(f"Removed webhook {endpoint_id} and its undelivered events.")
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))

    @command
    async def webhook_secret_rotate(self, tenant: str, endpoint_id: int) -> None:
        """A new secret (sent once); the old one signs as well for 24 hours."""
        made = await self._engine.webhook_secret_rotate(tenant, endpoint_id)
        self.webhook_secret.emit(made.endpoint, made.secret)
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))

    @command
    async def set_webhook_enabled(self, tenant: str, endpoint_id: int, enabled: bool) -> None:
        changed = await self._engine.webhook_enable(tenant, endpoint_id, enabled)
        word = "enabled" if enabled else "disabled"
        held = " Its held events are sent now." if enabled and changed else ""
        self.webhooks_changed.emit(
            f"Webhook {endpoint_id} {word}.{held}" if changed else f"It was {word} already."
        )
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))

    @command
    async def webhook_test(self, tenant: str, endpoint_id: int) -> None:
        answer = await self._engine.webhook_test(tenant, endpoint_id)
        if answer.ok:
            self.webhooks_changed.emit(f"Webhook {endpoint_id} answered {answer.status}.")
        else:
            why = answer.error or f"answered {answer.status}"
            self.webhooks_changed.emit(f"The test of webhook {endpoint_id} failed: {why}.")

    @command
    async def webhook_events_replay(self, tenant: str, endpoint_id: int, back_s: float) -> None:
        count = await self._engine.webhook_events_replay(
            tenant, since=self._engine.clock.wall() - back_s, endpoint_id=endpoint_id
        )
        plural = "" if count == 1 else "s"
        self.webhooks_changed.emit(f"{count} event{plural} of webhook {endpoint_id} sent again.")
        self.webhooks_loaded.emit(tenant, await self._engine.webhooks(tenant))
