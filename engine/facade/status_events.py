"""Status events: each tenant's endpoints (added, listed, removed, their secret rotated, enabled
and disabled), a signed test event, the replay of past events, and what the outbox holds. The
events themselves are written by the store with the changes that cause them and delivered by
each running worker's courier (``engine.dispatch.status_events``). A secret is returned once,
when it is made; every change is audited, never with a secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.errors import ConfigError
from engine.core.present import rfc3339
from engine.core.status_events import (
    EventType,
    check_endpoint_url,
    event_body,
    new_secret,
    parse_events,
    signed_headers,
)
from engine.facade.parts import EngineParts
from engine.store.endpoints import EndpointRecord
from engine.store.outbox import EndpointHealth, EventRow

if TYPE_CHECKING:  # the HTTP machinery loads when a test event is first posted
    from engine.providers.endpoint_post import PostAnswer

__all__ = ["EndpointView", "NewSecret", "StatusEventsPart"]

MAX_EVENTS_PAGE = 1000


@dataclass(frozen=True, slots=True)
class EndpointView:
    """An endpoint and its outbox: what is waiting, given up and delivered, and the oldest
    event not delivered yet."""

    endpoint: EndpointRecord
    health: EndpointHealth


@dataclass(frozen=True, slots=True)
class NewSecret:
    """An endpoint as made or rotated, and its new secret: shown once, never again."""

    endpoint: EndpointRecord
    secret: str


class StatusEventsPart(EngineParts):
    async def webhook_add(
        self,
        tenant: str,
        url: str,
        *,
        events: list[str] | None = None,
        allow_private: bool = False,
        rate_per_s: float | None = None,
        burst: float | None = None,
    ) -> NewSecret:
        """Subscribe ``url`` to ``tenant``'s events (``events``: type names, all when None).
        ConfigError for a URL it may not have (not https, a private address without
        ``allow_private``), an unknown type or a bad rate; NotFound for an unknown tenant."""
        checked = check_endpoint_url(url, allow_private=allow_private)
        mask = parse_events(events)
        if rate_per_s is not None and not 0 < rate_per_s <= 100_000:
            raise ConfigError("an endpoint's rate is above 0 and at most 100,000 a second.")
        if burst is not None and (rate_per_s is None or not 1 <= burst <= 1_000_000):
            raise ConfigError("an endpoint's burst is at least 1, with a rate.")
        tenant_id, _ = await self._ids(tenant)
        secret = new_secret()
        record = await self.store.endpoints.add_endpoint(
            tenant_id,
            url=checked,
            events=mask,
            secret=secret,
            allow_private=allow_private,
            rate_per_s=rate_per_s,
            burst=burst,
            now=self.clock.wall(),
            actor=self.actor,
        )
        return NewSecret(record, secret)

    async def webhooks(self, tenant: str) -> list[EndpointView]:
        """``tenant``'s endpoints, oldest first, each with its outbox's figures."""
        tenant_id, _ = await self._ids(tenant)
        found = await self.store.endpoints.endpoints(tenant_id)
        health = await self.store.outbox.health([e.id for e in found])
        return [EndpointView(e, health[e.id]) for e in found]

    async def webhooks_all(self, *, limit: int = 1000) -> list[tuple[str, EndpointView]]:
        """Every tenant's endpoints with their tenant's name (the console, the metrics)."""
        found = await self.store.endpoints.all_endpoints(limit=limit)
        health = await self.store.outbox.health([e.id for e in found])
        names = {t.id: t.name for t in self.directory.tenants.values()}
        return [
            (names.get(e.tenant_id, str(e.tenant_id)), EndpointView(e, health[e.id])) for e in found
        ]

    async def webhook_remove(self, tenant: str, endpoint_id: int) -> None:
        """The endpoint and its undelivered events, gone. NotFound when the tenant has none."""
        tenant_id, _ = await self._ids(tenant)
        await self.store.endpoints.remove_endpoint(
            tenant_id, endpoint_id, now=self.clock.wall(), actor=self.actor
        )

    async def webhook_secret_rotate(
        self, tenant: str, endpoint_id: int, *, grace_s: float = 86400.0
    ) -> NewSecret:
        """A new secret for the endpoint; the old one signs as well for ``grace_s`` (each event
        then carries two signatures), 0 to drop it at once."""
        if not 0 <= grace_s <= 30 * 86400:
            raise ConfigError("the grace period is 0 to 30 days.")
        tenant_id, _ = await self._ids(tenant)
        secret = new_secret()
        now = self.clock.wall()
        record = await self.store.endpoints.rotate_secret(
            tenant_id,
            endpoint_id,
            secret=secret,
            grace_until=now + grace_s,
            now=now,
            actor=self.actor,
        )
        return NewSecret(record, secret)

    async def webhook_enable(self, tenant: str, endpoint_id: int, enabled: bool = True) -> bool:
        """Enable (its held events due at once) or disable an endpoint; whether it changed."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.endpoints.set_enabled(
            tenant_id,
            endpoint_id,
            enabled=enabled,
            reason="disabled by an operator",
            now=self.clock.wall(),
            actor=self.actor,
        )

    async def webhook_test(self, tenant: str, endpoint_id: int) -> PostAnswer:
        """Post a signed ``webhook.test`` event to the endpoint now (not through the outbox)
        and return its answer."""
        tenant_id, _ = await self._ids(tenant)
        record = await self.store.endpoints.endpoint(tenant_id, endpoint_id)
        secrets = await self.store.endpoints.secrets([endpoint_id], self.clock.wall())
        now = self.clock.wall()
        event_id = f"evt_test_{endpoint_id}_{int(now * 1000)}"
        data = {"tenant": tenant, "endpoint": endpoint_id, "message": "a test from OmniPost"}
        body = event_body(EventType.TEST.value, rfc3339(now, "milliseconds"), data)
        headers = signed_headers(secrets[endpoint_id].secrets, event_id, int(now), body)
        from engine.providers.endpoint_post import EndpointPoster

        poster = EndpointPoster()
        try:
            answer = await poster.post(
                record.url, body, headers, allow_private=record.allow_private
            )
        finally:
            await poster.aclose()
        detail = {"endpoint": endpoint_id, "status": answer.status}
        await self.store.audit.write(self.actor, "webhook.test", tenant_id, detail, now=now)
        return answer

    async def webhook_events_replay(
        self, tenant: str, *, since: float, endpoint_id: int | None = None
    ) -> int:
        """Send ``tenant``'s events since ``since`` (unix s) again, delivered or given up, each
        with its own id; returns how many."""
        tenant_id, _ = await self._ids(tenant)
        count = await self.store.outbox.replay(
            tenant_id,
            since=since,
            endpoint_id=endpoint_id,
            now=self.clock.wall(),
            actor=self.actor,
        )
        return count

    async def webhook_events(
        self, tenant: str, *, endpoint_id: int | None = None, limit: int = 50
    ) -> list[EventRow]:
        """``tenant``'s newest events (one endpoint's with ``endpoint_id``), newest first:
        what each try answered."""
        if not 1 <= limit <= MAX_EVENTS_PAGE:
            raise ConfigError(f"the limit must be 1 to {MAX_EVENTS_PAGE}.")
        tenant_id, _ = await self._ids(tenant)
        if endpoint_id is not None:
            await self.store.endpoints.endpoint(tenant_id, endpoint_id)
        return await self.store.outbox.events(tenant_id, endpoint_id=endpoint_id, limit=limit)
