"""What the HTTP front door asks of the engine, each call scoped to one tenant: a notification
by id, a page of them newest first, the tenant's limits and queue depth, and the claims of
idempotent requests (``engine.store.requests`` says how a key is claimed, finished and freed).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.domain import Limit, NotificationState
from engine.core.errors import ConfigError, NotFound
from engine.facade.parts import EngineParts
from engine.store import NotificationView, RequestClaim, TenantRecord

__all__ = ["RequestsPart", "TenantLimits"]

# A claim's lease: how long a request may be under way before a repeat takes its key over
# (its server died). Requests finish in milliseconds; a retry after a restart waits at most this.
REQUEST_LEASE_S = 5.0
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's limits as its API callers see them: the tenant's own dispatch limit, its
    limits with particular providers, each API key's request limit and its queue cap (the
    last two ``None`` where the server's default applies)."""

    tenant: str
    limit: Limit | None
    providers: dict[str, Limit]
    api_limit: Limit | None
    max_queued: int | None


class RequestsPart(EngineParts):
    async def notification(self, tenant: str, notification_id: int) -> NotificationView:
        """The tenant's notification ``notification_id``; another tenant's id is not found,
        in the same words as a missing one."""
        tenant_id, _ = await self._ids(tenant)
        found = await self.store.notifications.get(tenant_id, notification_id)
        if found is None:
            raise NotFound(f"there is no notification {notification_id} for this tenant.")
        return found

    async def notification_page(
        self,
        tenant: str,
        *,
        state: NotificationState | None = None,
        provider: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[NotificationView]:
        """The tenant's notifications with ids below ``before``, newest first (``limit`` of
        them, at most 1,000): pass the last id of a page as ``before`` for the next."""
        if not 1 <= limit <= MAX_PAGE:
            raise ConfigError(f"the page size must be between 1 and {MAX_PAGE}, not {limit}.")
        tenant_id, _ = await self._ids(tenant)
        provider_id = None
        if provider is not None:
            provider_id = self.directory.provider_id(provider)
            if provider_id is None:
                _, provider_id = await self._ids(tenant, provider)
        return await self.store.notifications.page(
            tenant_id, state=state, provider_id=provider_id, before_id=before, limit=limit
        )

    async def provider_known(self, name: str) -> bool:
        """Whether a provider named ``name`` is configured (the store is asked when this
        engine has not seen it yet)."""
        if self.directory.provider_id(name) is not None:
            return True
        try:  # one indexed read: an unknown name costs no reload of the configuration
            await self.store.config.provider(name)
        except NotFound:
            return False
        await self.directory.refresh()  # a provider added since the last load
        return True

    async def ready(self) -> None:
        """Return when the store answers a read; raise StoreUnavailable when it does not."""
        await self.store.overview.config_token()

    def provider_name(self, provider_id: int) -> str:
        """The name of the provider with store id ``provider_id`` (as loaded last)."""
        record = self.directory.providers.get(provider_id)
        return record.name if record is not None else f"#{provider_id}"

    async def tenant(self, name: str) -> TenantRecord:
        """The tenant named ``name`` as the store has it now."""
        return await self.store.config.tenant(name)

    async def tenant_limits(self, tenant: str) -> TenantLimits:
        record = await self.store.config.tenant(tenant)
        pairs = {p.provider: p.limit for p in await self.store.config.pair_limits_of(record.id)}
        return TenantLimits(tenant, record.limit, pairs, record.api_limit, record.max_queued)

    async def queued_count(self, tenant: str) -> int:
        """How many notifications ``tenant`` holds queued (from the kept counts)."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.notifications.queued_of(tenant_id)

    # -- idempotent requests ----------------------------------------------------------------

    async def request_claim(
        self, tenant: str, key: str, fingerprint: str, *, owner: str
    ) -> RequestClaim:
        """Claim the tenant's idempotency ``key`` for a request whose body has ``fingerprint``."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.requests.claim(
            tenant_id, key, fingerprint, owner=owner, lease_s=REQUEST_LEASE_S, now=self.clock.wall()
        )

    async def request_finish(
        self,
        tenant: str,
        key: str,
        *,
        owner: str,
        status: int,
        response: str,
        notification_id: int | None,
    ) -> bool:
        """Keep the answer to ``key``'s request, replayed to every repeat."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.requests.finish(
            tenant_id,
            key,
            owner=owner,
            status=status,
            response=response,
            notification_id=notification_id,
        )

    async def request_abandon(self, tenant: str, key: str, *, owner: str) -> bool:
        """Free ``key`` after its request failed, so that a retry starts afresh."""
        tenant_id, _ = await self._ids(tenant)
        return await self.store.requests.abandon(tenant_id, key, owner=owner)
