"""The engine's view of its configuration: tenants, providers (with live instances), limits.

Refreshed from the store on an interval, so a change made by another process (a rate set from
the CLI while a worker runs) reaches this one too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.core.collector import collector_paused
from engine.core.domain import BucketKey, Limit
from engine.core.errors import OmniPostError
from engine.core.policy import send_keys
from engine.dispatch.ports import ConfigSource
from engine.limits.limiter import Limiter
from engine.providers.base import Provider, ProviderConfig, ProviderFactory, batch_size
from engine.store import ProviderRecord, TenantRecord

__all__ = ["Directory", "Route"]

log = logging.getLogger(__name__)

_PART = 5_000  # limits handled between two turns of the event loop


@dataclass(frozen=True, slots=True)
class Route:
    """What a send of one (tenant, provider) pair needs, looked up once per configuration: the
    records, the provider's instance, the buckets it takes a token from, whether a limit is
    configured on any of them, and how many messages the provider takes in one call."""

    tenant: TenantRecord
    provider: ProviderRecord
    instance: Provider
    buckets: tuple[BucketKey, ...]
    paced: bool
    per: int


@dataclass
class Directory:
    store: ConfigSource
    limiter: Limiter
    factories: Mapping[str, ProviderFactory]
    tenants: dict[int, TenantRecord] = field(default_factory=dict)
    providers: dict[int, ProviderRecord] = field(default_factory=dict)
    instances: dict[int, Provider] = field(default_factory=dict)
    limits: dict[BucketKey, Limit] = field(default_factory=dict)
    broken: dict[int, str] = field(default_factory=dict)  # provider id -> why it cannot be built
    limits_version: int = 0  # grows whenever a limit changes
    loads: int = 0  # grows with every load of the configuration (``refresh``)
    # Per (tenant id, provider id): its route, or None when it has none; kept until a refresh.
    _routes: dict[tuple[int, int], Route | None] = field(default_factory=dict, repr=False)
    # Names to ids, of the dict (by identity) they were built from: tenant_id and
    # provider_id build them again after each load.
    _tenant_ids: tuple[object, dict[str, int]] = field(default=(None, {}), repr=False)
    _provider_ids: tuple[object, dict[str, int]] = field(default=(None, {}), repr=False)

    def tenant_id(self, name: str) -> int | None:
        if self._tenant_ids[0] is not self.tenants:  # indexed once per load, not per call
            self._tenant_ids = (self.tenants, {t.name: t.id for t in self.tenants.values()})
        return self._tenant_ids[1].get(name)

    def enabled(self, tenant_id: int) -> bool:
        tenant = self.tenants.get(tenant_id)
        return tenant is not None and tenant.enabled

    def provider_id(self, name: str) -> int | None:
        if self._provider_ids[0] is not self.providers:
            self._provider_ids = (self.providers, {p.name: p.id for p in self.providers.values()})
        return self._provider_ids[1].get(name)

    def route(self, pair: tuple[int, int]) -> Route | None:
        """The route of ``pair`` (tenant id, provider id); None when the tenant or provider is
        not configured or the provider could not be built. Asked once per claim and per send:
        worked out once, until the next refresh."""
        try:
            return self._routes[pair]
        except KeyError:
            pass
        tenant = self.tenants.get(pair[0])
        record = self.providers.get(pair[1])
        instance = self.instances.get(pair[1])
        found = None
        if tenant is not None and record is not None and instance is not None:
            buckets = send_keys(tenant.name, record.name)  # the same tuple after a refresh
            paced = not self.limits.keys().isdisjoint(buckets)
            found = Route(tenant, record, instance, buckets, paced, batch_size(instance))
        self._routes[pair] = found
        return found

    async def refresh(self) -> None:
        """Reload everything; reconfigure the limiter and rebuild providers that changed."""
        with collector_paused():  # a million lasting objects at 100,000 tenants
            await self._reload()

    async def _reload(self) -> None:
        tenants = await self.store.config.tenants()
        providers = await self.store.config.providers(with_secrets=True)
        pairs = await self.store.config.pair_limit_keys()
        self.tenants = {t.id: t for t in tenants}
        self.loads += 1
        try:
            await self._apply_limits(await _limits(tenants, providers, pairs))
            await self._rebuild(providers)
        finally:
            self._routes = {}

    async def _apply_limits(self, wanted: dict[BucketKey, Limit]) -> None:
        """The limits that went or changed, to the limiter in one batch; the loop turns every
        ``_PART`` limits compared (400,000 at 100,000 tenants)."""
        had = self.limits
        if not had:  # the first load: every limit is new
            changes: list[tuple[BucketKey, Limit | None]] = list(wanted.items())
        else:
            changes = []
            for index, (k, limit) in enumerate(wanted.items()):
                old = had.get(k)
                if old is not limit and old != limit:  # the same value read: the same Limit
                    changes.append((k, limit))
                if index % _PART == _PART - 1:
                    await asyncio.sleep(0)
            for index, k in enumerate(had):
                if k not in wanted:
                    changes.append((k, None))
                if index % _PART == _PART - 1:
                    await asyncio.sleep(0)
        if changes:
            await self.limiter.configure_many(changes)
        self.limits = wanted
        self.limits_version += bool(changes)

    async def _rebuild(self, providers: list[ProviderRecord]) -> None:
        fresh = {p.id: p for p in providers}
        for pid, old in list(self.providers.items()):
            new = fresh.get(pid)
            if new is None or (new.kind, new.options, new.secrets) != (
                old.kind,
                old.options,
                old.secrets,
            ):
                instance = self.instances.pop(pid, None)
                if instance is not None:
                    await instance.aclose()
        for pid, record in fresh.items():
            if pid not in self.instances:
                self._build(record)
        self.providers = fresh

    def _build(self, record: ProviderRecord) -> None:
        factory = self.factories.get(record.kind)
        self.broken.pop(record.id, None)
        if factory is None:
            self.broken[record.id] = f"provider kind {record.kind!r} is not known"
            log.error("provider %s: kind %r is not known", record.name, record.kind)
            return
        config = ProviderConfig(record.name, record.kind, record.options, record.secrets)
        try:
            self.instances[record.id] = factory(config)
        except OmniPostError as exc:
            self.broken[record.id] = exc.message
            log.error("provider %s cannot be built: %s", record.name, exc.message)

    async def aclose(self) -> None:
        for instance in self.instances.values():
            await instance.aclose()
        self.instances.clear()


async def _limits(
    tenants: list[TenantRecord],
    providers: list[ProviderRecord],
    pairs: list[tuple[BucketKey, Limit]],
) -> dict[BucketKey, Limit]:
    """Every configured limit by its bucket, with a turn of the event loop every ``_PART``."""
    wanted: dict[BucketKey, Limit] = {}
    for index, t in enumerate(tenants):
        if t.limit is not None:
            wanted[BucketKey.for_tenant(t.name)] = t.limit
        if index % _PART == _PART - 1:
            await asyncio.sleep(0)
    for p in providers:
        if p.limit is not None:
            wanted[BucketKey.for_provider(p.name)] = p.limit
    wanted.update(pairs)
    return wanted
