"""Reads for a console over thousands of tenants, each costing what it returns rather than a
read per tenant: the newest deliveries and notifications of every tenant at once, and a token
that tells whether the configuration changed (so that 10,000 tenants are not read again every
few seconds to find out)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from engine.core.domain import BucketKey, Limit, NotificationState
from engine.facade.parts import EngineParts
from engine.store import DeliveryEntry, NotificationView, TenantRecord

__all__ = ["AppliedConfig", "OverviewPart"]


@dataclass(frozen=True, slots=True)
class AppliedConfig:
    """The configuration an engine applies: its tenants by id and every configured limit by
    bucket (tenants', providers', pairs'), read-only views of what the engine holds, and
    ``load``: which load of the configuration they are (it grows with each), so that a console
    tells a change without comparing 400,000 limits."""

    tenants: Mapping[int, TenantRecord]
    limits: Mapping[BucketKey, Limit]
    load: int


QUEUED_FROM_TENANTS = 20  # queued notifications across tenants: of this many deepest tenants


class OverviewPart(EngineParts):
    async def deliveries_after(self, after_id: int, *, limit: int = 200) -> list[DeliveryEntry]:
        """The newest ``limit`` send attempts of any tenant after ``after_id``, newest first:
        one read, however many tenants sent."""
        return await self.store.overview.deliveries_after(after_id, limit=limit)

    async def notifications_newest(
        self, state: NotificationState | None, *, limit: int = 200
    ) -> list[NotificationView]:
        """Up to ``limit`` notifications of every tenant in ``state`` (None: any), newest id
        first: dead and delivered ones by when they finished, leased ones by lease expiry
        (one index range each); queued ones are the oldest waiting of the
        ``QUEUED_FROM_TENANTS`` tenants with the most queued (no index orders queued rows
        across tenants). The cost follows ``limit``, not the tenants."""
        states = [state] if state is not None else list(NotificationState)
        found: list[NotificationView] = []
        for one in states:
            if one is NotificationState.QUEUED:
                overview = await self.store.overview.overview(QUEUED_FROM_TENANTS)
                for tenant_id, _queued in overview.deepest:
                    found += await self.store.notifications.list_by_tenant(
                        tenant_id, state=one, limit=limit
                    )
            else:
                found += await self.store.overview.newest_in_state(one, limit)
        found.sort(key=lambda v: v.id, reverse=True)
        return found[:limit]

    async def config_applied(self) -> AppliedConfig:
        """The tenants and limits this engine applies, loaded from the store again first when
        they changed (``config_token``): what a console in the same process shows, without a
        second copy of 100,000 tenants and 400,000 limits read and kept beside the engine's.
        Providers are not in it (``providers()``: their records without secrets)."""
        await self._load_config()
        directory = self.directory
        return AppliedConfig(
            MappingProxyType(directory.tenants),
            MappingProxyType(directory.limits),
            directory.loads,
        )

    async def config_token(self) -> tuple[int, ...]:
        """A value that changes whenever tenants, providers or limits change (the newest audit
        entry, and how many of each there are): four aggregates, however many tenants."""
        return await self.store.overview.config_token()
