"""Tenants, providers, limits, workers and the audit log: the small, slow-changing tables."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.domain import UNSET, BucketKey, Limit, Unset, validate_name
from engine.core.errors import ConfigError, Conflict, NotFound
from engine.store.audit import write_audit
from engine.store.database import Database, in_parts
from engine.store.records import (
    TENANT_SORTS,
    PairLimit,
    ProviderRecord,
    TenantPage,
    TenantQuery,
    TenantRecord,
)
from engine.store.schema import providers, rate_limits, tenants
from engine.store.tenant_bulk import TenantImport, TenantSpec, check_tenant_specs, write_tenants

__all__ = ["ConfigRepo"]


def _limit(rate: float | None, burst: float | None) -> Limit | None:
    return None if rate is None or burst is None else _limit_of(rate, burst)


@functools.lru_cache(maxsize=1024)
def _limit_of(rate: float, burst: float) -> Limit:
    """One ``Limit`` per value read (immutable): 100,000 tenants with the same few limits load
    without checking and making each again."""
    return Limit(rate, burst)


class ConfigRepo:
    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    # -- tenants ----------------------------------------------------------------------------

    async def tenant_add(
        self, name: str, limit: Limit | None, *, enabled: bool = True, now: float, actor: str
    ) -> TenantRecord:
        validate_name("tenant", name)

        async def tx(conn: AsyncConnection) -> TenantRecord:
            if await _tenant_row(conn, name) is not None:
                raise Conflict(f"tenant {name!r} already exists; use `tenant set` to change it.")
            values = {"name": name, "enabled": enabled, "created_at": now, **_limit_cols(limit)}
            tid = (await conn.execute(tenants.insert().values(values))).inserted_primary_key
            assert tid is not None
            await write_audit(
                conn, now, actor, "tenant.add", tid[0], {"name": name, "limit": limit}
            )
            return TenantRecord(tid[0], name, limit, enabled)

        return await self._db.write(tx)

    async def tenant_update(
        self,
        name: str,
        *,
        limit: Limit | Unset | None = UNSET,
        enabled: bool | None = None,
        api_limit: Limit | Unset | None = UNSET,
        max_queued: int | Unset | None = UNSET,
        default_ttl_s: float | Unset | None = UNSET,
        now: float,
        actor: str,
    ) -> TenantRecord:
        """Change a tenant's limit, enabled flag, API request limit, queue cap or default
        deadline (``None`` puts a limit or cap back to its default, and takes the deadline
        away)."""

        async def tx(conn: AsyncConnection) -> TenantRecord:
            row = await _tenant_row(conn, name)
            if row is None:
                raise NotFound(f"no tenant named {name!r}.")
            values: dict[str, Any] = {}
            if limit is not UNSET:
                values.update(_limit_cols(limit))
            if enabled is not None:
                values["enabled"] = enabled
            if api_limit is not UNSET:
                values["api_rate_per_s"] = None if api_limit is None else api_limit.rate_per_s
                values["api_burst"] = None if api_limit is None else api_limit.burst
            if max_queued is not UNSET:
                values["max_queued"] = max_queued
            if default_ttl_s is not UNSET:
                values["default_ttl_s"] = default_ttl_s
            if values:
                await conn.execute(tenants.update().where(tenants.c.id == row.id).values(values))
                detail = {"name": name, **{k: v for k, v in values.items()}}
                await write_audit(conn, now, actor, "tenant.set", row.id, detail)
            new = await _tenant_row(conn, name)
            assert new is not None
            return _tenant(new)

        return await self._db.write(tx)

    async def tenant_import(
        self, specs: Sequence[TenantSpec], *, update: bool = False, now: float, actor: str
    ) -> TenantImport:
        """Add every spec's tenant in one transaction, audited as one ``tenant.import`` entry
        of how many were added and updated; with ``update``, existing tenants take the spec's
        limit and enabled flag. All or nothing: a name not valid or given twice is a
        ``ConfigError``, an existing one without ``update`` a ``Conflict``, each naming the
        spec's line. No specs write nothing, not even the audit entry."""
        check_tenant_specs(specs)
        if not specs:
            return TenantImport(added=0, updated=0)

        async def tx(conn: AsyncConnection) -> TenantImport:
            done = await write_tenants(conn, specs, update=update, now=now)
            detail = {"added": done.added, "updated": done.updated}
            await write_audit(conn, now, actor, "tenant.import", None, detail)
            return done

        return await self._db.write(tx)

    async def tenants(self) -> list[TenantRecord]:
        async def tx(conn: AsyncConnection) -> list[TenantRecord]:
            return await in_parts(
                conn, sa.select(tenants).order_by(tenants.c.name), _tenant, raw=True
            )

        return await self._db.read(tx)

    async def tenant_page(self, query: TenantQuery) -> TenantPage:
        """One page of the tenants (``TenantQuery``) and how many match: a count and one
        ordered, offset read in the database, whatever the number of tenants."""
        if query.sort not in TENANT_SORTS:
            sorts = ", ".join(TENANT_SORTS)
            raise ConfigError(f"tenants sort by one of {sorts}, not {query.sort!r}.")
        where = tenants.c.name.icontains(query.match, autoescape=True) if query.match else None
        column = _TENANT_COLUMNS[query.sort]
        order: list[Any] = []
        if query.sort in ("rate", "burst"):  # unlimited (NULL) is above every number
            order.append(column.is_(None).desc() if query.descending else column.is_(None))
        order.append(column.desc() if query.descending else column.asc())
        if query.sort != "name":
            order.append(tenants.c.name)

        async def tx(conn: AsyncConnection) -> TenantPage:
            counted = sa.select(sa.func.count()).select_from(tenants)
            page = sa.select(tenants).order_by(*order).offset(max(0, query.offset))
            if where is not None:
                counted, page = counted.where(where), page.where(where)
            total = (await conn.execute(counted)).scalar_one()
            rows = await conn.execute(page.limit(max(0, query.limit)))
            return TenantPage(tuple(map(_tenant, rows)), int(total), query)

        return await self._db.read(tx)

    async def tenant(self, name: str) -> TenantRecord:
        async def tx(conn: AsyncConnection) -> TenantRecord:
            row = await _tenant_row(conn, name)
            if row is None:
                raise NotFound(f"no tenant named {name!r}.")
            return _tenant(row)

        return await self._db.read(tx)

    # -- providers --------------------------------------------------------------------------

    async def provider_add(
        self,
        name: str,
        kind: str,
        limit: Limit | None,
        options: Mapping[str, str],
        secrets: Mapping[str, str],
        *,
        now: float,
        actor: str,
    ) -> ProviderRecord:
        validate_name("provider", name)

        async def tx(conn: AsyncConnection) -> ProviderRecord:
            if await _provider_row(conn, name) is not None:
                raise Conflict(
                    f"provider {name!r} already exists; use `provider set` to change it."
                )
            values = {
                "name": name,
                "kind": kind,
                "options": json.dumps(dict(options), sort_keys=True),
                "secrets": self._seal(secrets),
                "created_at": now,
                **_limit_cols(limit),
            }
            pid = (await conn.execute(providers.insert().values(values))).inserted_primary_key
            assert pid is not None
            detail = {"name": name, "kind": kind, "limit": limit, "secrets": sorted(secrets)}
            await write_audit(conn, now, actor, "provider.add", None, detail)
            row = await _provider_row(conn, name)
            assert row is not None
            return self._provider(row, with_secrets=False)

        return await self._db.write(tx)

    async def provider_update(
        self,
        name: str,
        *,
        kind: str | None = None,
        limit: Limit | Unset | None = UNSET,
        options: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        now: float,
        actor: str,
    ) -> ProviderRecord:
        """Change a provider. ``options`` and ``secrets`` are merged into what is stored; a value
        of ``""`` removes that option or secret."""

        async def tx(conn: AsyncConnection) -> ProviderRecord:
            row = await _provider_row(conn, name)
            if row is None:
                raise NotFound(f"no provider named {name!r}.")
            values: dict[str, Any] = {}
            if kind is not None:
                values["kind"] = kind
            if limit is not UNSET:
                values.update(_limit_cols(limit))
            if options:
                merged = _merge(json.loads(row.options), options)
                values["options"] = json.dumps(merged, sort_keys=True)
            if secrets:
                values["secrets"] = self._seal(_merge(self._open(row.secrets), secrets))
            if values:
                await conn.execute(
                    providers.update().where(providers.c.id == row.id).values(values)
                )
                detail = {"name": name, "changed": sorted(values)}
                await write_audit(conn, now, actor, "provider.set", None, detail)
            new = await _provider_row(conn, name)
            assert new is not None
            return self._provider(new, with_secrets=False)

        return await self._db.write(tx)

    async def providers(self, *, with_secrets: bool = False) -> list[ProviderRecord]:
        async def tx(conn: AsyncConnection) -> list[ProviderRecord]:
            rows = await conn.execute(sa.select(providers).order_by(providers.c.name))
            return [self._provider(r, with_secrets=with_secrets) for r in rows]

        return await self._db.read(tx)

    async def provider(self, name: str, *, with_secrets: bool = False) -> ProviderRecord:
        async def tx(conn: AsyncConnection) -> ProviderRecord:
            row = await _provider_row(conn, name)
            if row is None:
                raise NotFound(f"no provider named {name!r}.")
            return self._provider(row, with_secrets=with_secrets)

        return await self._db.read(tx)

    def _seal(self, secrets: Mapping[str, str]) -> str | None:
        return self._box.encrypt(json.dumps(dict(secrets))) if secrets else None

    def _open(self, token: str | None) -> dict[str, str]:
        return dict(json.loads(self._box.decrypt(token))) if token else {}

    def _provider(self, row: sa.Row[Any], *, with_secrets: bool) -> ProviderRecord:
        secrets = self._open(row.secrets)
        return ProviderRecord(
            id=row.id,
            name=row.name,
            kind=row.kind,
            limit=_limit(row.rate_per_s, row.burst),
            options=dict(json.loads(row.options)),
            secret_names=tuple(sorted(secrets)),
            secrets=secrets if with_secrets else {},
        )

    # -- pair limits ------------------------------------------------------------------------

    async def pair_limit_set(
        self, tenant: str, provider: str, limit: Limit | None, *, now: float, actor: str
    ) -> None:
        """Set or (with ``None``) remove the limit of one (tenant, provider) pair."""

        async def tx(conn: AsyncConnection) -> None:
            t = await _tenant_row(conn, tenant)
            p = await _provider_row(conn, provider)
            if t is None:
                raise NotFound(f"no tenant named {tenant!r}.")
            if p is None:
                raise NotFound(f"no provider named {provider!r}.")
            key = (rate_limits.c.tenant_id == t.id) & (rate_limits.c.provider_id == p.id)
            await conn.execute(rate_limits.delete().where(key))
            if limit is not None:
                await conn.execute(
                    rate_limits.insert().values(
                        tenant_id=t.id,
                        provider_id=p.id,
                        rate_per_s=limit.rate_per_s,
                        burst=limit.burst,
                    )
                )
            detail = {"tenant": tenant, "provider": provider, "limit": limit}
            await write_audit(conn, now, actor, "limit.set", t.id, detail)

        await self._db.write(tx)

    async def pair_limits(self) -> list[PairLimit]:
        return await self._pair_limits(None)

    async def pair_limit_keys(self) -> list[tuple[BucketKey, Limit]]:
        """Every pair limit by its bucket, in no order: what an engine loads (400,000 of
        them at 100,000 tenants: no sort in the database, no record per row)."""

        async def tx(conn: AsyncConnection) -> list[tuple[BucketKey, Limit]]:
            query = (
                sa.select(
                    tenants.c.name, providers.c.name, rate_limits.c.rate_per_s, rate_limits.c.burst
                )
                .join(tenants, tenants.c.id == rate_limits.c.tenant_id)
                .join(providers, providers.c.id == rate_limits.c.provider_id)
            )
            return await in_parts(conn, query, _pair_key, raw=True)

        return await self._db.read(tx)

    async def pair_limits_of(self, tenant_id: int) -> list[PairLimit]:
        """The limits of one tenant with particular providers."""
        return await self._pair_limits(tenant_id)

    async def _pair_limits(self, tenant_id: int | None) -> list[PairLimit]:
        async def tx(conn: AsyncConnection) -> list[PairLimit]:
            query = (  # the columns of a PairLimit, in order: made by position
                sa.select(
                    rate_limits.c.tenant_id,
                    rate_limits.c.provider_id,
                    tenants.c.name,
                    providers.c.name,
                    rate_limits.c.rate_per_s,
                    rate_limits.c.burst,
                )
                .join(tenants, tenants.c.id == rate_limits.c.tenant_id)
                .join(providers, providers.c.id == rate_limits.c.provider_id)
                .order_by(tenants.c.name, providers.c.name)
            )
            if tenant_id is not None:
                query = query.where(rate_limits.c.tenant_id == tenant_id)
            return await in_parts(conn, query, _pair_limit)

        return await self._db.read(tx)


def _limit_cols(limit: Limit | None) -> dict[str, float | None]:
    if limit is None:
        return {"rate_per_s": None, "burst": None}
    return {"rate_per_s": limit.rate_per_s, "burst": limit.burst}


def _merge(current: dict[str, str], changes: Mapping[str, str]) -> dict[str, str]:
    merged = dict(current)
    for key, value in changes.items():
        if value == "":
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _tenant(row: Sequence[Any]) -> TenantRecord:
    """A row of ``sa.select(tenants)``, by position (100,000 at a worker's start)."""
    tenant_id, name, rate, burst, enabled, _created, api_rate, api_burst, max_queued, ttl_s = row
    limit = None if rate is None or burst is None else _limit_of(rate, burst)
    api_limit = None if api_rate is None or api_burst is None else _limit_of(api_rate, api_burst)
    return TenantRecord(tenant_id, name, limit, bool(enabled), api_limit, max_queued, ttl_s)


_TENANT_COLUMNS: dict[str, sa.Column[Any]] = {
    "name": tenants.c.name,
    "rate": tenants.c.rate_per_s,
    "burst": tenants.c.burst,
    "enabled": tenants.c.enabled,
}


def _pair_key(row: Sequence[Any]) -> tuple[BucketKey, Limit]:
    tenant, provider, rate, burst = row
    return BucketKey.for_pair(tenant, provider), _limit_of(rate, burst)


def _pair_limit(row: Sequence[Any]) -> PairLimit:
    tenant_id, provider_id, tenant, provider, rate, burst = row
    return PairLimit(tenant_id, provider_id, tenant, provider, _limit_of(rate, burst))


async def _tenant_row(conn: AsyncConnection, name: str) -> sa.Row[Any] | None:
    return (await conn.execute(sa.select(tenants).where(tenants.c.name == name))).first()


async def _provider_row(conn: AsyncConnection, name: str) -> sa.Row[Any] | None:
    return (await conn.execute(sa.select(providers).where(providers.c.name == name))).first()
