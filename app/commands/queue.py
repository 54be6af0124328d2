"""Queue commands: enqueue one notification or a file of them; cancel queued ones; list, retry
or discard dead ones."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from app.as_json import dead_json
from app.commands.base import open_engine
from app.commands.jsonlines import check_priority, parse_payload, read_batch
from app.output import print_json, print_table
from app.session import Context
from engine import ConfigError, Engine, ItemRefused, NotCancellable, NotFound, lifetimes, rfc3339

__all__ = ["cancel", "dead_list", "dead_repair", "enqueue", "enqueue_file"]

EXIT_NOT_ALL = 1  # some of the IDs were not cancelled


async def enqueue(
    ctx: Context,
    tenant: str,
    provider: str,
    recipient: str,
    *,
    payload: str = "{}",
    key: str | None = None,
    priority: int = 0,
    lifetime: Mapping[str, float | None] | None = None,
) -> int:
    """Queue one notification; ``payload`` is the JSON text of an object; ``lifetime``: its
    ``send_at``, ``expires_at`` and ``ttl_s``, as ``Engine.enqueue`` takes them."""
    body = parse_payload(payload)
    check_priority(priority)
    async with open_engine(ctx) as engine:
        result = await engine.enqueue(
            tenant, provider, recipient, body, key=key, priority=priority, **(lifetime or {})
        )
    if result.suppressed:
        print(
            f"suppressed as {result.id} (key {result.idempotency_key}): the recipient is on"
            f" {tenant}'s suppression list for {provider}; not sent"
        )
        return 0
    if result.duplicate:
        word = "already queued as"
    else:
        word = "queued as" if result.send_at is None else "scheduled as"
    when = f" for {rfc3339(round(result.send_at))}" if result.send_at is not None else ""
    until = (
        f", expires {rfc3339(round(result.expires_at))}" if result.expires_at is not None else ""
    )
    print(f"{word} {result.id}{when} (key {result.idempotency_key}){until}")
    return 0


async def enqueue_file(ctx: Context, path: str) -> int:
    """Queue every line of a JSON-lines file (``-``: stdin): all of them, or none when a line
    or a name is bad. Lines of different tenants are written in separate transactions."""
    by_tenant, by_line = read_batch(path)
    async with open_engine(ctx) as engine:
        for tenant, items in by_tenant.items():  # check every name before writing anything
            await engine.names_check(providers=sorted({item[0] for item in items}))
            await engine.names_check(tenants=[tenant])
            try:  # and every time, as the engine will
                lifetimes(items, time.time(), most_ahead_s=engine.settings.most_ahead_s)
            except ItemRefused as refused:
                line = by_line[tenant][refused.index]
                raise ConfigError(f"line {line}: {refused.reason}") from None
        fresh = duplicates = suppressed = scheduled = 0
        for tenant, items in by_tenant.items():
            try:
                results = await engine.enqueue_many(tenant, items)
            except ItemRefused as refused:  # checked above; for what changed meanwhile
                line = by_line[tenant][refused.index]
                raise ConfigError(f"line {line}: {refused.reason}") from None
            duplicates += sum(r.duplicate for r in results)
            suppressed += sum(r.suppressed for r in results)
            scheduled += sum(r.send_at is not None for r in results)
            fresh += sum(not (r.duplicate or r.suppressed) for r in results)
    also = f", suppressed {suppressed} (on a suppression list; not sent)" if suppressed else ""
    later = f" ({scheduled} of them scheduled)" if scheduled else ""
    print(f"queued {fresh}{later}, already queued {duplicates}{also}")
    return 0


async def cancel(ctx: Context, tenant: str, ids: Sequence[int], *, as_json: bool = False) -> int:
    """Cancel the tenant's queued notifications ``ids``, each on its own: a line per ID
    (``--json``: an object per ID), and exit 1 when some were not found or not queued. An
    unknown tenant is a usage error (NotFound) before anything is cancelled."""
    async with open_engine(ctx) as engine:
        await engine.names_check(tenants=[tenant])
        # Each ID once, in the order given.
        results = [await _cancel_one(engine, tenant, i) for i in dict.fromkeys(ids)]
    if as_json:
        print_json(results)
    else:
        for result in results:
            if result["cancelled"]:
                print(f"cancelled {result['id']}")
            else:
                print(f"omnipost: {result['error']}", file=sys.stderr)
    return 0 if all(r["cancelled"] for r in results) else EXIT_NOT_ALL


async def _cancel_one(engine: Engine, tenant: str, notification_id: int) -> dict[str, Any]:
    """``{"id", "state", "cancelled"}``, and ``"error"`` (one sentence) when not cancelled."""
    try:
        view = await engine.notification_cancel(tenant, notification_id)
    except NotCancellable as exc:
        return {
            "id": notification_id,
            "state": exc.state.value,
            "cancelled": False,
            "error": exc.message,
        }
    except NotFound as exc:
        return {"id": notification_id, "state": None, "cancelled": False, "error": exc.message}
    return {"id": notification_id, "state": view.state.value, "cancelled": True}


async def dead_list(ctx: Context, tenant: str | None = None, *, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        rows = await engine.dead(tenant)
        names = {p.id: p.name for p in await engine.providers()}
    if as_json:
        print_json([dead_json(t, v, names.get(v.provider_id)) for t, v in rows])
        return 0
    print_table(
        ["ID", "TENANT", "PROVIDER", "RECIPIENT", "ATTEMPTS", "ERROR"],
        [
            (
                v.id,
                t,
                names.get(v.provider_id),
                v.recipient_masked,
                v.attempt,
                (v.last_error or "")[:60],
            )
            for t, v in rows
        ],
    )
    return 0


async def dead_repair(
    ctx: Context, ids: Sequence[int] | None, *, retry: bool, tenant: str | None = None
) -> int:
    """Queue again (``retry``) or discard the dead notifications ``ids`` (None: every one, of
    ``tenant`` when given). Exit 2 when some of the IDs were not dead ones."""
    suppressed = 0
    async with open_engine(ctx) as engine:
        if retry:
            count, suppressed = await engine.dead_retry_counts(ids, tenant=tenant)
        else:
            count = await engine.dead_discard(ids, tenant=tenant)
    verb = "queued again" if retry else "discarded"
    also = (
        f", {suppressed} suppressed instead (the recipient is on the tenant's suppression list)"
        if suppressed
        else ""
    )
    print(f"{count} dead notification{'s' if count != 1 else ''} {verb}{also}")
    if ids is not None and count + suppressed < len(set(ids)):
        print(
            f"omnipost: {len(set(ids)) - count - suppressed} of the IDs are not dead notifications"
            + (f" of {tenant}" if tenant else "")
            + ".",
            file=sys.stderr,
        )
        return 2
    return 0
