"""The engine's configuration: tenants, providers and their limits, workers, and the audit log.

Every change is written to the store with the engine's actor (audited) and applied live.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from engine.core.domain import UNSET, BucketKey, Limit, Message, SendResult, Unset, validate_name
from engine.core.errors import ConfigError, NotFound
from engine.facade.parts import EngineParts
from engine.providers.base import ProviderConfig
from engine.store import (
    AuditEntry,
    PairLimit,
    ProviderRecord,
    TenantImport,
    TenantPage,
    TenantQuery,
    TenantRecord,
    TenantSpec,
    WorkerRecord,
)

__all__ = ["TEST_PAYLOAD", "ConfigurationPart"]

# What ``provider_test_send`` sends when given no payload: every built-in kind finds its text
# in it (an email's subject and text, an SMS's body, a push's title and body).
TEST_PAYLOAD = {
    "subject": "OmniPost test",
    "text": "A test send from OmniPost.",
    "title": "OmniPost test",
    "body": "A test send from OmniPost.",
}


class ConfigurationPart(EngineParts):
    async def tenant_add(
        self, name: str, limit: Limit | None = None, *, enabled: bool = True
    ) -> TenantRecord:
        record = await self.store.config.tenant_add(
            name, limit, enabled=enabled, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return record

    async def tenant_update(
        self,
        name: str,
        *,
        limit: Limit | Unset | None = UNSET,
        enabled: bool | None = None,
        api_limit: Limit | Unset | None = UNSET,
        max_queued: int | Unset | None = UNSET,
        default_ttl_s: float | Unset | None = UNSET,
    ) -> TenantRecord:
        """Change a tenant's limit (``None`` removes it) or enabled flag, applied live; its
        HTTP API request limit per key or queue cap (``None``: back to the server's default);
        or the deadline, in seconds after their send time, of its notifications that name none
        (``None``: none of its own)."""
        if max_queued is not UNSET and max_queued is not None and max_queued < 1:
            raise ConfigError(
                f"the queue cap must be a whole number of at least 1, not {max_queued}."
            )
        if default_ttl_s is not UNSET and default_ttl_s is not None:
            most = self.settings.most_ahead_s
            if not (isinstance(default_ttl_s, int | float) and 0 < default_ttl_s <= most):
                raise ConfigError(
                    f"a default TTL must be a number of seconds above 0 and at most {most:g}, "
                    f"not {default_ttl_s!r}."
                )
        record = await self.store.config.tenant_update(
            name,
            limit=limit,
            enabled=enabled,
            api_limit=api_limit,
            max_queued=max_queued,
            default_ttl_s=default_ttl_s,
            now=self.clock.wall(),
            actor=self.actor,
        )
        await self._applied()
        return record

    async def tenant_import(
        self, specs: Sequence[TenantSpec], *, update: bool = False
    ) -> TenantImport:
        """Add the tenants of ``specs`` (``parse_tenant_lines`` reads them from JSON lines) in
        one transaction, audited as one entry; applied live. With ``update``, tenants that
        exist take the spec's limit and enabled flag; without, one that exists is refused
        (``Conflict``). All or nothing: any refusal, one sentence naming the spec's line,
        writes none of them."""
        summary = await self.store.config.tenant_import(
            specs, update=update, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return summary

    def provider_check(
        self, name: str, kind: str, options: Mapping[str, str], secrets: Mapping[str, str]
    ) -> None:
        """Raise ConfigError with one sentence unless the provider could be built as given."""
        validate_name("provider", name)
        factory = self.factories.get(kind)
        if factory is None:
            kinds = ", ".join(sorted(self.factories))
            raise ConfigError(f"provider kind {kind!r} is not known; use one of {kinds}.")
        provider = factory(ProviderConfig(name, kind, dict(options), dict(secrets)))
        # Built only to validate; nothing was opened yet, so closing is cheap.
        self._keep(asyncio.ensure_future(provider.aclose()))

    async def provider_test_send(
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

    async def provider_add(
        self,
        name: str,
        kind: str,
        limit: Limit | None = None,
        options: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> ProviderRecord:
        self.provider_check(name, kind, options or {}, secrets or {})
        record = await self.store.config.provider_add(
            name, kind, limit, options or {}, secrets or {}, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()
        return record

    async def provider_update(
        self,
        name: str,
        *,
        kind: str | None = None,
        limit: Limit | Unset | None = UNSET,
        options: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> ProviderRecord:
        current = await self.store.config.provider(name, with_secrets=True)
        merged_options = {**current.options, **(options or {})}
        merged_secrets = {**current.secrets, **(secrets or {})}
        self.provider_check(
            name,
            kind or current.kind,
            {k: v for k, v in merged_options.items() if v != ""},
            {k: v for k, v in merged_secrets.items() if v != ""},
        )
        record = await self.store.config.provider_update(
            name,
            kind=kind,
            limit=limit,
            options=options,
            secrets=secrets,
            now=self.clock.wall(),
            actor=self.actor,
        )
        await self._applied()
        return record

    async def pair_limit_set(self, tenant: str, provider: str, limit: Limit | None) -> None:
        await self.store.config.pair_limit_set(
            tenant, provider, limit, now=self.clock.wall(), actor=self.actor
        )
        await self._applied()

    async def tenants(self) -> list[TenantRecord]:
        return await self.store.config.tenants()

    async def tenant_page(self, query: TenantQuery) -> TenantPage:
        """One page of the tenants, filtered by name and sorted (``TenantQuery``), and how
        many match: what a table of 100,000 tenants shows without reading them all."""
        return await self.store.config.tenant_page(query)

    async def providers(self) -> list[ProviderRecord]:
        return await self.store.config.providers()

    async def workers(self) -> list[WorkerRecord]:
        since = self.clock.wall() - self.settings.worker_ttl_s
        return await self.store.workers.read(alive_since=since)

    async def pair_limits(self) -> list[PairLimit]:
        return await self.store.config.pair_limits()

    async def pair_limits_of(self, tenant: str) -> list[PairLimit]:
        """``tenant``'s limits on particular providers; raises ``NotFound`` for no tenant."""
        record = await self.store.config.tenant(tenant)
        return await self.store.config.pair_limits_of(record.id)

    async def limits(self) -> dict[BucketKey, Limit]:
        """Every configured limit by the bucket it sets: tenants, providers, pairs."""
        tenants = await self.tenants()
        providers = await self.providers()
        limits = {BucketKey.for_tenant(t.name): t.limit for t in tenants if t.limit is not None}
        limits |= {BucketKey.for_provider(p.name): p.limit for p in providers if p.limit}
        pairs = await self.pair_limits()
        return limits | {BucketKey.for_pair(p.tenant, p.provider): p.limit for p in pairs}

    async def audit_entries(self, *, limit: int = 100) -> list[AuditEntry]:
        """The newest audit entries, newest first."""
        return await self.store.audit.entries(limit=limit)

    async def names_check(
        self, *, tenants: Sequence[str] = (), providers: Sequence[str] = ()
    ) -> None:
        """Raise NotFound, naming the first, unless every tenant and provider exists."""
        for tenant in tenants:
            await self._ids(tenant)
        for provider in providers:
            if self.directory.provider_id(provider) is None:
                await self.directory.refresh()
            if self.directory.provider_id(provider) is None:
                raise NotFound(f"no provider named {provider!r}.")
