"""``omnipost webhook``: a tenant's endpoints for status events (what became of each of its
notifications, posted to its application and signed): add, list, remove, rotate-secret, enable,
disable, test, replay and events. A signing secret is printed once, when it is made."""

from __future__ import annotations

import time
from collections.abc import Sequence

from app.commands.base import open_engine
from app.output import print_json, print_table
from app.session import Context
from engine import (
    EndpointRecord,
    EndpointView,
    NewSecret,
    event_names,
    parse_duration,
    parse_time,
    rfc3339,
)

__all__ = [
    "webhook_add",
    "webhook_enable",
    "webhook_events",
    "webhook_list",
    "webhook_remove",
    "webhook_replay",
    "webhook_rotate",
    "webhook_test",
]


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _endpoint_json(e: EndpointRecord) -> dict[str, object]:
    return {
        "id": e.id,
        "url": e.url,
        "events": event_names(e.events),
        "allow_private": e.allow_private,
        "rate_per_s": e.rate_per_s,
        "burst": e.burst,
        "enabled": e.disabled_at is None,
        "disabled_at": None if e.disabled_at is None else rfc3339(e.disabled_at),
        "disabled_reason": e.disabled_reason,
        "created_at": rfc3339(e.created_at),
    }


def _made(made: NewSecret, as_json: bool, verb: str) -> None:
    if as_json:
        print_json({**_endpoint_json(made.endpoint), "secret": made.secret})
        return
    e = made.endpoint
    print(f"webhook {e.id} {verb}: {e.url} ({', '.join(event_names(e.events))})")
    print(f"signing secret (shown once, keep it): {made.secret}")
    if e.old_secret_until is not None:
        print(f"the old secret signs as well until {_when(e.old_secret_until)}")


async def webhook_add(
    ctx: Context,
    tenant: str,
    url: str,
    *,
    events: Sequence[str] | None = None,
    allow_private: bool = False,
    rate: float | None = None,
    burst: float | None = None,
    as_json: bool = False,
) -> int:
    """Subscribe ``url`` to the tenant's status events (``events``: all when not given)."""
    names = None if not events else [n for part in events for n in part.split(",") if n.strip()]
    async with open_engine(ctx) as engine:
        made = await engine.webhook_add(
            tenant, url, events=names, allow_private=allow_private, rate_per_s=rate, burst=burst
        )
    _made(made, as_json, "added")
    return 0


def _view_json(view: EndpointView) -> dict[str, object]:
    h = view.health
    return {
        **_endpoint_json(view.endpoint),
        "pending": h.pending,
        "failed": h.failed,
        "held": h.held,
        "oldest_pending_at": None if h.oldest_pending_at is None else rfc3339(h.oldest_pending_at),
    }


async def webhook_list(ctx: Context, tenant: str, *, as_json: bool = False) -> int:
    """The tenant's endpoints, each with what its outbox holds."""
    async with open_engine(ctx) as engine:
        views = await engine.webhooks(tenant)
    if as_json:
        print_json([_view_json(v) for v in views])
        return 0
    rows = []
    for v in views:
        e, h = v.endpoint, v.health
        state = "enabled" if e.disabled_at is None else f"disabled: {e.disabled_reason}"
        rows.append(
            (
                e.id,
                e.url,
                ",".join(n.removeprefix("notification.") for n in event_names(e.events)),
                state,
                h.pending,
                h.held,
                h.failed,
                _when(h.oldest_pending_at),
            )
        )
    print_table(
        ["ID", "URL", "EVENTS", "STATE", "PENDING", "HELD", "GAVE UP", "OLDEST PENDING"],
        rows,
    )
    return 0


async def webhook_remove(ctx: Context, tenant: str, endpoint_id: int) -> int:
    async with open_engine(ctx) as engine:
        await engine.webhook_remove(tenant, endpoint_id)
    print(f"removed webhook {endpoint_id} of {tenant} and its undelivered events")
    return 0


async def webhook_rotate(
    ctx: Context, tenant: str, endpoint_id: int, *, grace: str, as_json: bool = False
) -> int:
    """A new signing secret; the old one signs as well for ``grace`` (``24h``, ``0``)."""
    no_grace = grace.strip().lower() in ("0", "0s", "none")
    grace_s = 0.0 if no_grace else parse_duration(grace, what="the grace period")
    async with open_engine(ctx) as engine:
        made = await engine.webhook_secret_rotate(tenant, endpoint_id, grace_s=grace_s)
    _made(made, as_json, "rotated")
    return 0


async def webhook_enable(ctx: Context, tenant: str, endpoint_id: int, *, enabled: bool) -> int:
    async with open_engine(ctx) as engine:
        changed = await engine.webhook_enable(tenant, endpoint_id, enabled)
    word = "enabled" if enabled else "disabled"
    print(f"webhook {endpoint_id} {word}" if changed else f"webhook {endpoint_id} was {word}")
    return 0


async def webhook_test(ctx: Context, tenant: str, endpoint_id: int) -> int:
    """Post a signed ``webhook.test`` event now and print the answer; exit 1 unless 2xx."""
    async with open_engine(ctx) as engine:
        answer = await engine.webhook_test(tenant, endpoint_id)
    if answer.ok:
        print(f"webhook {endpoint_id} answered {answer.status}")
        return 0
    print(f"webhook {endpoint_id} failed: {answer.error or f'answered {answer.status}'}")
    return 1


def _since(text: str, now: float) -> float:
    """``--since``: an RFC 3339 time, or a duration back from now (``2h``)."""
    if text and text[0].isdigit() and "T" not in text and "-" not in text:
        return now - parse_duration(text, what="--since")
    return parse_time(text, what="--since")


async def webhook_replay(
    ctx: Context, tenant: str, *, since: str, endpoint_id: int | None = None
) -> int:
    """Send the tenant's events since a time again (each with its own id)."""
    async with open_engine(ctx) as engine:
        count = await engine.webhook_events_replay(
            tenant, since=_since(since, engine.clock.wall()), endpoint_id=endpoint_id
        )
    plural = "" if count == 1 else "s"
    print(f"{count} event{plural} of {tenant} will be sent again by the running workers")
    return 0


async def webhook_events(
    ctx: Context,
    tenant: str,
    *,
    endpoint_id: int | None = None,
    limit: int = 50,
    as_json: bool = False,
) -> int:
    """The tenant's newest events and what each try answered."""
    async with open_engine(ctx) as engine:
        rows = await engine.webhook_events(tenant, endpoint_id=endpoint_id, limit=limit)
    if as_json:
        print_json(
            [
                {
                    "id": f"evt_{r.id}",
                    "endpoint": r.endpoint_id,
                    "notification": r.notification_id,
                    "type": r.type,
                    "state": r.state,
                    "occurred_at": rfc3339(r.occurred_at),
                    "tries": r.tries,
                    "last_status": r.last_status,
                    "last_error": r.last_error,
                }
                for r in rows
            ]
        )
        return 0
    print_table(
        ["EVENT", "WEBHOOK", "NOTIFICATION", "TYPE", "STATE", "AT", "TRIES", "ANSWER"],
        [
            (
                f"evt_{r.id}",
                r.endpoint_id,
                "-" if r.notification_id is None else r.notification_id,
                r.type,
                r.state,
                _when(r.occurred_at),
                r.tries,
                r.last_error or ("-" if r.last_status is None else r.last_status),
            )
            for r in rows
        ],
    )
    return 0
