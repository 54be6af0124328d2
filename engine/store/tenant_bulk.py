"""Many tenants written at once (``omnipost tenant import``): checked first, then added and
updated in the caller's one transaction with one statement each, however many there are."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.domain import Limit, validate_name
from engine.core.errors import ConfigError, Conflict
from engine.store.schema import tenants

__all__ = ["TenantImport", "TenantNames", "TenantSpec", "check_tenant_specs", "write_tenants"]

# Names looked up per ``IN (...)``: far below the bind parameters a statement may have (SQLite
# 32,766, asyncpg 32,767), and few enough round trips for 10,000 lines.
_NAMES_PER_QUERY = 1000


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """One tenant as an import gives it: its name, limit (None: unlimited) and enabled flag,
    and the line of the file it came from (None when it came from no file), for messages."""

    name: str
    limit: Limit | None = None
    enabled: bool = True
    line: int | None = None
    api_limit: Limit | None = None  # the HTTP API's request limit per key (None: the default)
    max_queued: int | None = None  # the HTTP API's queue cap (None: the default)


@dataclass(frozen=True, slots=True)
class TenantImport:
    """What an import did: tenants added, and existing ones updated."""

    added: int
    updated: int

    @property
    def total(self) -> int:
        return self.added + self.updated

    def __str__(self) -> str:
        """``imported 3 tenants (2 added, 1 updated)``: one form for the CLI and the console."""
        noun = "tenant" if self.total == 1 else "tenants"
        return f"imported {self.total} {noun} ({self.added} added, {self.updated} updated)"


def where(spec: TenantSpec) -> str:
    """``line 7: `` to start a sentence about ``spec``, or nothing when it has no line."""
    return "" if spec.line is None else f"line {spec.line}: "


class TenantNames:
    """The names met so far: ``add`` refuses a spec whose name ``tenant add`` would refuse, or
    that an earlier spec had. An import checks its lines in order with one, so the sentence
    names the first bad line."""

    def __init__(self) -> None:
        self._first: dict[str, TenantSpec] = {}

    def add(self, spec: TenantSpec) -> None:
        """Raise ``ConfigError`` (one sentence, naming ``spec``'s line) unless its name is valid
        and new."""
        try:
            validate_name("tenant", spec.name)
        except ConfigError as exc:
            raise ConfigError(f"{where(spec)}{exc.message}") from None
        first = self._first.setdefault(spec.name, spec)
        if first is not spec:
            again = "given twice" if first.line is None else f"on line {first.line} already"
            raise ConfigError(f"{where(spec)}tenant {spec.name!r} is {again}; give each once.")


def check_tenant_specs(specs: Iterable[TenantSpec]) -> None:
    """Raise ``ConfigError`` naming the first spec whose name is not valid or repeats one."""
    names = TenantNames()
    for spec in specs:
        names.add(spec)


# One statement for every existing tenant: SQLAlchemy sends it as an executemany. The bind
# names differ from the columns', which an UPDATE's SET keeps for itself.
_UPDATE = (
    tenants.update()
    .where(tenants.c.id == sa.bindparam("tenant_id"))
    .values(
        rate_per_s=sa.bindparam("new_rate_per_s"),
        burst=sa.bindparam("new_burst"),
        enabled=sa.bindparam("new_enabled"),
        api_rate_per_s=sa.bindparam("new_api_rate_per_s"),
        api_burst=sa.bindparam("new_api_burst"),
        max_queued=sa.bindparam("new_max_queued"),
    )
)


async def write_tenants(
    conn: AsyncConnection, specs: Sequence[TenantSpec], *, update: bool, now: float
) -> TenantImport:
    """Add the specs' new tenants and, with ``update``, give the existing ones the spec's
    limit, enabled flag and HTTP API limits, in ``conn``'s transaction; the specs were checked
    (``check_tenant_specs``). Without ``update`` an existing tenant is refused: ``Conflict``
    naming the first one's line, and nothing written (the caller's transaction rolls back)."""
    ids = await _existing(conn, [spec.name for spec in specs])
    known = [spec for spec in specs if spec.name in ids]
    if known and not update:
        first = known[0]
        raise Conflict(
            f"{where(first)}tenant {first.name!r} already exists; "
            "import with --update to change existing tenants."
        )
    fresh = [spec for spec in specs if spec.name not in ids]
    if fresh:
        rows = [{"name": s.name, "created_at": now, **_settings(s, "")} for s in fresh]
        await conn.execute(tenants.insert(), rows)
    if known:
        changes = [{"tenant_id": ids[s.name], **_settings(s, "new_")} for s in known]
        await conn.execute(_UPDATE, changes)
    return TenantImport(added=len(fresh), updated=len(known))


def _settings(spec: TenantSpec, prefix: str) -> dict[str, Any]:
    limit, api = spec.limit, spec.api_limit
    return {
        f"{prefix}rate_per_s": None if limit is None else limit.rate_per_s,
        f"{prefix}burst": None if limit is None else limit.burst,
        f"{prefix}enabled": spec.enabled,
        f"{prefix}api_rate_per_s": None if api is None else api.rate_per_s,
        f"{prefix}api_burst": None if api is None else api.burst,
        f"{prefix}max_queued": spec.max_queued,
    }


async def _existing(conn: AsyncConnection, names: Sequence[str]) -> dict[str, int]:
    """The id of each of ``names`` that is a tenant already."""
    ids: dict[str, int] = {}
    for start in range(0, len(names), _NAMES_PER_QUERY):
        chunk = names[start : start + _NAMES_PER_QUERY]
        query = sa.select(tenants.c.name, tenants.c.id).where(tenants.c.name.in_(chunk))
        ids.update((await conn.execute(query)).all())  # (name, id) pairs
    return ids
