"""``omnipost apikey``: a tenant's keys for the HTTP API, made (shown once), listed, revoked."""

from __future__ import annotations

import time

from app.as_json import apikey_json
from app.commands.base import open_engine
from app.output import print_json, print_table
from app.session import Context
from engine import parse_scope

__all__ = ["apikey_create", "apikey_list", "apikey_revoke"]


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


async def apikey_create(
    ctx: Context, tenant: str, *, name: str, scope: str, as_json: bool = False
) -> int:
    scopes = parse_scope(scope)  # before the store is opened: bad input changes nothing
    async with open_engine(ctx) as engine:
        record, key = await engine.api_key_create(tenant, name=name, scope=scopes)
    if as_json:
        print_json(
            {"id": record.id, "prefix": record.prefix, "key": key, "tenant": record.tenant}
            | {"name": record.name, "scope": list(record.scope)}
        )
        return 0
    print(f"api key {record.id} for {record.tenant} ({','.join(record.scope)}): {key}")
    print("shown this once: keep it now; the store keeps only its hash.")
    return 0


async def apikey_list(ctx: Context, tenant: str | None = None, *, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        records = await engine.api_keys(tenant)
    if as_json:
        print_json([apikey_json(r) for r in records])
        return 0
    print_table(
        ["ID", "PREFIX", "TENANT", "NAME", "SCOPE", "CREATED", "LAST USED", "REVOKED"],
        [
            (
                r.id,
                r.prefix,
                r.tenant,
                r.name or "-",
                ",".join(r.scope),
                _when(r.created_at),
                _when(r.last_used_at),
                _when(r.revoked_at),
            )
            for r in records
        ],
    )
    return 0


async def apikey_revoke(ctx: Context, key_id: int) -> int:
    async with open_engine(ctx) as engine:
        record = await engine.api_key_revoke(key_id)
    print(f"api key {record.id} ({record.prefix}) of {record.tenant} revoked")
    return 0
