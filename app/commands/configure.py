"""Configuration commands: the store's schema, tenants, providers and per-pair limits."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.as_json import circuit_json, import_json, pair_json, provider_json, tenant_json
from app.commands.base import open_engine, reading_engine
from app.commands.jsonlines import read_lines
from app.commands.keep import KEEP, Keep, LimitChange
from app.output import print_json, print_table
from app.session import Context, actor
from app.wiring import build_store
from engine import (
    MASKED_VALUE,
    UNSET,
    Circuit,
    CircuitState,
    ConfigError,
    Limit,
    Outcome,
    fmt_limit,
    mask,
    masked_url,
    parse_tenant_lines,
    tenant_line,
)

__all__ = [
    "KEEP",
    "Keep",
    "LimitChange",
    "limit_list",
    "limit_set",
    "migrate",
    "provider_add",
    "provider_list",
    "provider_resume",
    "provider_set",
    "provider_test",
    "tenant_add",
    "tenant_export",
    "tenant_import",
    "tenant_list",
    "tenant_set",
]


def _changes(limit: LimitChange) -> dict[str, Limit | None]:
    return {} if isinstance(limit, Keep) else {"limit": limit}


async def migrate(ctx: Context) -> int:
    async with build_store(ctx.db_url, ctx.box) as store:
        revision = await store.migrate()
    print(f"store {masked_url(ctx.db_url)} is at revision {revision}")
    return 0


# -- tenants -------------------------------------------------------------------------------


async def tenant_add(ctx: Context, name: str, limit: Limit | None, *, enabled: bool) -> int:
    async with open_engine(ctx) as engine:
        record = await engine.tenant_add(name, limit, enabled=enabled)
    print(f"tenant {record.name} added: {fmt_limit(record.limit)}")
    return 0


async def tenant_set(
    ctx: Context,
    name: str,
    *,
    limit: LimitChange = KEEP,
    enabled: bool | None = None,
    **api: Any,
) -> int:
    """Change a tenant; ``api`` holds ``api_limit``, ``max_queued`` and ``default_ttl_s``
    when they change."""
    async with open_engine(ctx) as engine:
        record = await engine.tenant_update(
            name,
            enabled=enabled,
            limit=_changes(limit).get("limit", UNSET),
            api_limit=api.get("api_limit", UNSET),
            max_queued=api.get("max_queued", UNSET),
            default_ttl_s=api.get("default_ttl_s", UNSET),
        )
    state = "enabled" if record.enabled else "disabled"
    line = f"tenant {record.name}: {fmt_limit(record.limit)}, {state}"
    if "api_limit" in api or "max_queued" in api:
        requests = fmt_limit(record.api_limit) if record.api_limit else "the server's default"
        cap = f"{record.max_queued:,}" if record.max_queued else "the server's default"
        line += f"; API requests per key {requests}, queue cap {cap}"
    if "default_ttl_s" in api:
        ttl = record.default_ttl_s
        line += f"; default TTL {ttl:g} s" if ttl is not None else "; no default TTL of its own"
    print(line)
    return 0


async def tenant_list(ctx: Context, *, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        tenants = await engine.tenants()
    if as_json:
        print_json([tenant_json(t) for t in tenants])
        return 0
    print_table(
        ["TENANT", "LIMIT", "ENABLED"],
        [(t.name, fmt_limit(t.limit), "yes" if t.enabled else "no") for t in tenants],
    )
    return 0


async def tenant_import(
    ctx: Context, path: str, *, update: bool = False, as_json: bool = False
) -> int:
    """Add the tenants of the JSON-lines file at ``path`` (``-``: stdin) in one transaction,
    and with ``update`` change those that exist. Every line is checked before the store is
    opened; a bad line, or an existing tenant without ``update``, writes nothing (exit 2)."""
    specs = parse_tenant_lines(read_lines(path))
    async with open_engine(ctx) as engine:
        summary = await engine.tenant_import(specs, update=update)
    if as_json:
        print_json(import_json(summary))
    else:
        print(summary)
    return 0


async def tenant_export(ctx: Context, output: str | None = None) -> int:
    """Every tenant as the JSON lines ``tenant import`` reads (``tenant import --update``
    sets the store back to them exactly), on stdout or into the file ``output``."""
    async with reading_engine(ctx) as engine:
        tenants = await engine.tenants()
    text = "".join(f"{tenant_line(t)}\n" for t in tenants)
    if output is None:
        sys.stdout.write(text)
        return 0
    _write(output, text)
    print(f"exported {len(tenants)} tenant{'' if len(tenants) == 1 else 's'} to {output}")
    return 0


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:  # exit 2, as a file import cannot read is
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}.") from None


# -- providers -----------------------------------------------------------------------------


async def provider_add(
    ctx: Context,
    name: str,
    kind: str,
    limit: Limit | None,
    options: Mapping[str, str],
    secrets: Mapping[str, str],
) -> int:
    async with open_engine(ctx) as engine:
        record = await engine.provider_add(name, kind, limit, options, secrets)
    print(f"provider {record.name} ({record.kind}) added: {fmt_limit(record.limit)}")
    return 0


async def provider_set(
    ctx: Context,
    name: str,
    *,
    kind: str | None = None,
    limit: LimitChange = KEEP,
    options: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
) -> int:
    async with open_engine(ctx) as engine:
        record = await engine.provider_update(
            name, kind=kind, options=options or {}, secrets=secrets or {}, **_changes(limit)
        )
    print(f"provider {record.name} ({record.kind}): {fmt_limit(record.limit)}")
    return 0


async def provider_list(ctx: Context, *, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        providers = await engine.providers()
        health = await engine.circuit_states()
    if as_json:
        print_json([provider_json(p) | {"health": circuit_json(health[p.name])} for p in providers])
        return 0
    rows = [
        (
            p.name,
            p.kind,
            fmt_limit(p.limit),
            fmt_circuit(health[p.name], time.time()),
            " ".join(f"{k}={v}" for k, v in sorted(p.options.items())),
            " ".join(f"{k}={MASKED_VALUE}" for k in p.secret_names),
        )
        for p in providers
    ]
    print_table(["PROVIDER", "KIND", "LIMIT", "CIRCUIT", "OPTIONS", "SECRETS"], rows)
    return 0


def fmt_circuit(health: Circuit, now: float) -> str:
    """``closed``, ``half-open``, ``open (probe in 12s)`` or ``open (probe due)`` (when no
    worker runs to send it)."""
    if health.state is CircuitState.OPEN and health.next_probe_at is not None:
        wait_s = health.next_probe_at - now
        return f"open (probe in {wait_s:.0f}s)" if wait_s >= 0.5 else "open (probe due)"
    return health.state.value


async def provider_resume(ctx: Context, name: str) -> int:
    """Close the provider's circuit now (it is back, or its settings were fixed)."""
    async with open_engine(ctx) as engine:
        before = (await engine.circuit_states()).get(name)
        health = await engine.circuit_close(name, actor=actor("cli"))
    was = before.state.value if before is not None else "closed"
    print(f"provider {health.provider}: circuit closed (was {was}); its notifications go out again")
    return 0


async def provider_test(ctx: Context, name: str, recipient: str) -> int:
    """Send one test message now; exit 1 unless it was delivered."""
    async with open_engine(ctx) as engine:
        result = await engine.provider_test_send(name, recipient)
    print(
        f"test send to {mask(recipient)} via {name}: {result.outcome.value}"
        + (f" ({result.detail})" if result.detail else "")
        + ("; the provider says this recipient is gone for good" if result.recipient_gone else "")
    )
    return 0 if result.outcome is Outcome.DELIVERED else 1


# -- limits of one tenant on one provider --------------------------------------------------


async def limit_set(ctx: Context, tenant: str, provider: str, limit: Limit | None) -> int:
    async with open_engine(ctx) as engine:
        await engine.pair_limit_set(tenant, provider, limit)
    print(f"limit of {tenant} on {provider}: {fmt_limit(limit)}")
    return 0


async def limit_list(ctx: Context, *, as_json: bool = False) -> int:
    async with reading_engine(ctx) as engine:
        pairs = await engine.pair_limits()
    if as_json:
        print_json([pair_json(p) for p in pairs])
        return 0
    print_table(
        ["TENANT", "PROVIDER", "LIMIT"], [(p.tenant, p.provider, fmt_limit(p.limit)) for p in pairs]
    )
    return 0
