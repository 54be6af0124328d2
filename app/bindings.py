"""What each ``omnipost`` command runs: the parsed flags turned into each command's typed
parameters (``app.commands`` never sees argparse), and the console's start. Imported by
``app.cli`` once the flags are parsed, so ``--version`` and ``--help`` import none of it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import os
import time
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any

from app import commands
from app.commands.keep import KEEP, Keep
from app.metrics_address import metrics_address
from app.output import RETENTION_WINDOWS
from app.paths import Paths, load_box
from app.screen import no_screen, xcb_problem
from app.session import Context, store_url
from engine import (
    BacklogTraffic,
    BurstTraffic,
    ConfigError,
    Limit,
    LimitChange,
    OmniPostError,
    Pattern,
    ReplayTraffic,
    Traffic,
    limit_of,
    parse_duration,
    parse_time,
)

__all__ = ["prepare_command"]


EXIT_FAILURE = 1

Command = Callable[[argparse.Namespace, Context], Coroutine[Any, Any, int]]


def _limit_change(a: argparse.Namespace) -> Limit | Keep | None:
    """The limit ``--rate``/``--burst`` ask for, None for ``--unlimited`` or ``--clear``,
    KEEP when no limit flag was given."""
    if getattr(a, "unlimited", False) or getattr(a, "clear", False):
        if a.rate is not None or a.burst is not None:
            raise ConfigError("give either --unlimited or --rate/--burst, not both.")
        return None
    if a.rate is None:
        if a.burst is not None:
            raise ConfigError("--burst needs --rate as well.")
        return KEEP
    return limit_of(a.rate, a.burst)


def _new_limit(a: argparse.Namespace) -> Limit | None:
    """The limit of something new: none unless flags give one."""
    limit = _limit_change(a)
    return None if isinstance(limit, Keep) else limit


def _tenant_set(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    limit = _limit_change(a)
    api = _api_changes(a)
    if a.default_ttl is not None:
        api["default_ttl_s"] = (
            None if a.default_ttl == "none" else parse_duration(a.default_ttl, "--default-ttl")
        )
    if isinstance(limit, Keep) and a.enabled is None and not api:
        raise ConfigError(
            "nothing to change; give --rate/--burst, --unlimited, --enable, --disable, "
            "--api-rate, --max-queued or --default-ttl."
        )
    return commands.configure.tenant_set(ctx, a.name, limit=limit, enabled=a.enabled, **api)


def _api_changes(a: argparse.Namespace) -> dict[str, Any]:
    """``tenant set``'s HTTP API flags as ``Engine.tenant_update`` takes them ('default':
    None, back to the server's)."""
    changes: dict[str, Any] = {}
    if a.api_rate is not None:
        if a.api_rate == "default":
            if a.api_burst is not None:
                raise ConfigError("give either --api-rate default or --api-burst, not both.")
            changes["api_limit"] = None
        else:
            rate = limit_of(a.api_rate).rate_per_s
            burst = a.api_burst if a.api_burst is not None else max(1.0, 2 * rate)
            changes["api_limit"] = limit_of(a.api_rate, burst)
    elif a.api_burst is not None:
        raise ConfigError("--api-burst needs --api-rate as well.")
    if a.max_queued is not None:
        if a.max_queued == "default":
            changes["max_queued"] = None
        elif a.max_queued.isdigit() and int(a.max_queued) > 0:
            changes["max_queued"] = int(a.max_queued)
        else:
            raise ConfigError(
                f"--max-queued must be a whole number of at least 1 or 'default', "
                f"not {a.max_queued!r}."
            )
    return changes


def _serve(a: argparse.Namespace, ctx: Context) -> int:
    from app import serve  # uvicorn and the API: only for this command

    rate = limit_of(a.api_rate).rate_per_s if a.api_rate is not None else None
    run = serve.Serve(
        host=a.host,
        port=a.port,
        workers=a.workers,
        tls_cert=a.tls_cert,
        tls_key=a.tls_key,
        redis_url=a.redis,
        access_log=a.access_log,
        api_rate=rate,
        max_queued=a.max_queued,
    )
    return serve.serve(ctx, run)


def _provider_add(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    options, secrets = dict(a.option), dict(a.secret)
    return commands.configure.provider_add(ctx, a.name, a.kind, _new_limit(a), options, secrets)


def _provider_set(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    limit = _limit_change(a)
    if isinstance(limit, Keep) and not (a.kind or a.option or a.secret):
        raise ConfigError("nothing to change; give --kind, --rate, --option or --secret.")
    return commands.configure.provider_set(
        ctx, a.name, kind=a.kind, limit=limit, options=dict(a.option), secrets=dict(a.secret)
    )


def _limit_set(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    limit = _limit_change(a)
    if isinstance(limit, Keep):
        raise ConfigError("give --rate (and --burst), or --clear.")
    return commands.configure.limit_set(ctx, a.tenant, a.provider, limit)


def _enqueue(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    if a.file is not None:
        if a.tenant or a.provider or a.recipient or a.key:
            raise ConfigError("give either --file or TENANT PROVIDER RECIPIENT, not both.")
        return commands.queue.enqueue_file(ctx, a.file)
    if not (a.tenant and a.provider and a.recipient):
        raise ConfigError("enqueue needs TENANT PROVIDER RECIPIENT, or --file PATH.")
    return commands.queue.enqueue(
        ctx,
        a.tenant,
        a.provider,
        a.recipient,
        payload=a.payload,
        key=a.key,
        priority=a.priority,
        lifetime=_lifetime(a),
    )


def _lifetime(a: argparse.Namespace) -> dict[str, float | None]:
    """``enqueue``'s --at/--in and --expires-at/--ttl as ``Engine.enqueue`` takes them."""
    send_at = parse_time(a.at, "--at") if a.at is not None else None
    if a.in_ is not None:
        send_at = time.time() + parse_duration(a.in_, "--in")
    expires_at = parse_time(a.expires_at, "--expires-at") if a.expires_at is not None else None
    ttl_s = parse_duration(a.ttl, "--ttl") if a.ttl is not None else None
    return {"send_at": send_at, "expires_at": expires_at, "ttl_s": ttl_s}


def _dead_repair(*, retry: bool) -> Command:
    def command(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
        if bool(a.ids) == bool(a.all):
            raise ConfigError("give the IDs of dead notifications, or --all.")
        ids = None if a.all else list(a.ids)
        return commands.queue.dead_repair(ctx, ids, retry=retry, tenant=a.tenant)

    return command


def _duration_or_none(text: str | None, what: str) -> float | None:
    return None if text is None else parse_duration(text, what=what)


def _worker(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    return commands.run.worker(
        ctx,
        commands.run.WorkerRun(
            concurrency=a.concurrency,
            lease_s=a.lease_s,
            prefetch=a.prefetch,
            webhooks_disabled_after_s=_duration_or_none(
                a.disable_webhooks_after, "--disable-webhooks-after"
            ),
            until_empty=a.until_empty,
            duration_s=a.duration,
            quiet=a.quiet,
            redis_url=a.redis,
            metrics=metrics_address(a.metrics_port, a.metrics_host),
            serve_port=a.serve,
        ),
    )


def _simulate(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    return commands.run.simulate(
        ctx,
        commands.run.Burst(
            tenants=tuple(t.strip() for t in a.tenant.split(",") if t.strip()),
            provider=a.provider,
            count=a.count,
            pattern=Pattern(a.pattern),
            duration_s=a.duration,
            concurrency=a.concurrency,
            dispatch=not a.no_dispatch,
            redis_url=a.redis,
        ),
    )


def _plan(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    changes = tuple(LimitChange.parse(text) for text in a.set)
    return commands.plan.plan(
        ctx, _plan_traffic(a), changes=changes, concurrency=a.concurrency, as_json=a.json
    )


def _plan_traffic(a: argparse.Namespace) -> Traffic:
    """The one traffic ``plan`` was given: a burst, ``--backlog`` or ``--replay``."""
    burst = a.tenant is not None
    if burst + a.backlog + (a.replay is not None) != 1:
        raise ConfigError(
            "give one traffic to plan: TENANT[,TENANT...] PROVIDER --count N, "
            "--backlog, or --replay HOURS."
        )
    if a.speed is not None and a.replay is None:
        raise ConfigError("--speed goes with --replay HOURS.")
    if not burst:
        if a.count is not None or a.pattern is not None or a.duration is not None or a.ttl:
            raise ConfigError(
                "--count, --pattern, --duration and --ttl shape a burst; not with --backlog or "
                "--replay (the backlog's own deadlines are planned)."
            )
        if a.backlog:
            return BacklogTraffic()
        return ReplayTraffic(a.replay, 1.0 if a.speed is None else a.speed)
    if a.provider is None or a.count is None:
        raise ConfigError("a burst to plan needs TENANT[,TENANT...] PROVIDER --count N.")
    tenants = tuple(t.strip() for t in a.tenant.split(",") if t.strip())
    if not tenants:
        raise ConfigError("name at least one tenant.")
    pattern = Pattern(a.pattern) if a.pattern is not None else Pattern.SPIKE
    ttl_s = parse_duration(a.ttl, "--ttl") if a.ttl is not None else None
    return BurstTraffic(tenants, a.provider, a.count, pattern, a.duration or 0.0, ttl_s)


def _retention_set(a: argparse.Namespace, ctx: Context) -> Coroutine[Any, Any, int]:
    ages = {field: getattr(a, field) for _, field, _ in RETENTION_WINDOWS if field in a}
    if not ages:
        raise ConfigError("nothing to change; give --delivered, --dead, --log or --audit.")
    return commands.retention.retention_set(ctx, ages)


# Each command by its words on the command line.
_COMMANDS: dict[str, Command] = {
    "migrate": lambda a, ctx: commands.configure.migrate(ctx),
    "tenant add": lambda a, ctx: commands.configure.tenant_add(
        ctx, a.name, _new_limit(a), enabled=a.enabled is not False
    ),
    "tenant set": _tenant_set,
    "tenant list": lambda a, ctx: commands.configure.tenant_list(ctx, as_json=a.json),
    "tenant import": lambda a, ctx: commands.configure.tenant_import(
        ctx, a.file, update=a.update, as_json=a.json
    ),
    "tenant export": lambda a, ctx: commands.configure.tenant_export(ctx, a.output),
    "provider add": _provider_add,
    "provider set": _provider_set,
    "provider list": lambda a, ctx: commands.configure.provider_list(ctx, as_json=a.json),
    "provider kinds": lambda a, ctx: _docs().provider_kinds(as_json=a.json),
    "provider test": lambda a, ctx: commands.configure.provider_test(ctx, a.name, a.recipient),
    "provider resume": lambda a, ctx: commands.configure.provider_resume(ctx, a.name),
    "limit set": _limit_set,
    "limit list": lambda a, ctx: commands.configure.limit_list(ctx, as_json=a.json),
    "enqueue": _enqueue,
    "cancel": lambda a, ctx: commands.queue.cancel(ctx, a.tenant, a.ids, as_json=a.json),
    "worker": _worker,
    "simulate": _simulate,
    "demo": lambda a, ctx: commands.run.demo(ctx, a.count),
    "plan": _plan,
    "stats": lambda a, ctx: commands.stats.stats(
        ctx, redis_url=a.redis, as_json=a.json, every=a.every, tenants=a.tenant
    ),
    "dead list": lambda a, ctx: commands.queue.dead_list(ctx, a.tenant, as_json=a.json),
    "dead retry": _dead_repair(retry=True),
    "dead discard": _dead_repair(retry=False),
    "retention show": lambda a, ctx: commands.retention.retention_show(ctx, as_json=a.json),
    "retention set": _retention_set,
    "prune": lambda a, ctx: commands.retention.prune(ctx, dry_run=a.dry_run, as_json=a.json),
    "keys rotate": lambda a, ctx: commands.keys.rotate(ctx, dry_run=a.dry_run, as_json=a.json),
    "apikey create": lambda a, ctx: commands.api_keys.apikey_create(
        ctx, a.tenant, name=a.name, scope=a.scope, as_json=a.json
    ),
    "apikey list": lambda a, ctx: commands.api_keys.apikey_list(ctx, a.tenant, as_json=a.json),
    "apikey revoke": lambda a, ctx: commands.api_keys.apikey_revoke(ctx, a.id),
    "suppression list": lambda a, ctx: commands.suppression.suppression_list(
        ctx, a.tenant, provider=a.provider, limit=a.limit, before=a.before, as_json=a.json
    ),
    "suppression add": lambda a, ctx: commands.suppression.suppression_add(
        ctx, a.tenant, a.provider, a.recipients, path=a.file, reason=a.reason
    ),
    "suppression remove": lambda a, ctx: commands.suppression.suppression_remove(
        ctx, a.tenant, a.provider, a.recipient, ids=a.ids or ()
    ),
    "webhook add": lambda a, ctx: commands.webhook.webhook_add(
        ctx,
        a.tenant,
        a.url,
        events=a.events,
        allow_private=a.allow_private,
        rate=a.rate,
        burst=a.burst,
        as_json=a.json,
    ),
    "webhook list": lambda a, ctx: commands.webhook.webhook_list(ctx, a.tenant, as_json=a.json),
    "webhook remove": lambda a, ctx: commands.webhook.webhook_remove(ctx, a.tenant, a.id),
    "webhook enable": lambda a, ctx: commands.webhook.webhook_enable(
        ctx, a.tenant, a.id, enabled=True
    ),
    "webhook disable": lambda a, ctx: commands.webhook.webhook_enable(
        ctx, a.tenant, a.id, enabled=False
    ),
    "webhook test": lambda a, ctx: commands.webhook.webhook_test(ctx, a.tenant, a.id),
    "webhook rotate-secret": lambda a, ctx: commands.webhook.webhook_rotate(
        ctx, a.tenant, a.id, grace=a.grace, as_json=a.json
    ),
    "webhook replay": lambda a, ctx: commands.webhook.webhook_replay(
        ctx, a.tenant, since=a.since, endpoint_id=a.endpoint
    ),
    "webhook events": lambda a, ctx: commands.webhook.webhook_events(
        ctx, a.tenant, endpoint_id=a.endpoint, limit=a.limit, as_json=a.json
    ),
}


def _run_gui(module: str, args: argparse.Namespace, ctx: Context) -> int:
    """Run ``app.<module>.main``; Qt is imported only here, so the CLI works without it."""
    if module == "console" and no_screen(os.environ):
        raise ConfigError(
            "the console needs a screen, and neither DISPLAY nor WAYLAND_DISPLAY is set; "
            "run `omnipost demo` for a burst in the terminal, or `omnipost self-test`."
        )
    try:
        gui = importlib.import_module(f"app.{module}")
    except ImportError as exc:
        raise OmniPostError(
            f"the console needs PySide6, qasync, pyqtgraph and numpy ({exc.name} is missing): "
            "pip install 'omnipost[console]'."
        ) from None
    problem = xcb_problem(os.environ) if module == "console" else None
    if problem is not None:  # Qt would abort with its own page of text
        raise OmniPostError(problem)
    result: int = gui.main(args, ctx)
    return result


def _docs() -> ModuleType:
    from app import docs  # the providers' declarations, and so every provider's module

    return docs


def prepare_command(args: argparse.Namespace) -> Callable[[], int]:
    """The command ``args`` name, ready: its modules imported and the keys read. Calling it
    runs the command and returns its exit code."""
    paths = Paths.from_env()
    if args.command == "keys" and args.action == "new":  # needs no store, nor the keys
        return functools.partial(commands.keys.new_key, paths, add=args.add)
    ctx = Context(paths, store_url(args.db or args.db_top, paths), load_box(paths))
    if args.command is None or args.command in ("console", "self-test"):
        return functools.partial(_run_gui, args.gui, args, ctx)
    if args.command == "serve":  # uvicorn runs its own loop (or processes)
        return functools.partial(_serve, args, ctx)
    words = " ".join(w for w in (args.command, getattr(args, "action", None)) if w)
    return functools.partial(asyncio.run, _COMMANDS[words](args, ctx))
