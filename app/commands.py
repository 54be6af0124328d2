"""The CLI's commands. Each returns an exit code; bad input raises ConfigError and friends,
which ``app.cli`` turns into one sentence and exit 2."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hashlib
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from app.config import Paths
from app.demo import seed_demo
from app.output import (
    RETENTION_WINDOWS,
    fmt_bytes,
    fmt_limit,
    fmt_retention,
    limit_json,
    print_json,
    print_table,
    retention_json,
)
from app.progress import report_progress, summary_line
from app.wiring import build_engine, build_store
from engine import (
    ConfigError,
    Engine,
    Limit,
    NotFound,
    Outcome,
    Pattern,
    PruneReport,
    SecretBox,
    StoreSize,
    format_age,
    mask,
    masked_url,
    parse_rate,
)

_UNCHANGED: Any = object()


@dataclass(frozen=True, slots=True)
class Context:
    paths: Paths
    db_url: str
    box: SecretBox

    @property
    def actor(self) -> str:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        return f"cli:{user}@{socket.gethostname()}"[:100]


@contextlib.asynccontextmanager
async def open_engine(
    ctx: Context, *, concurrency: int = 16, lease_s: float = 30.0, redis_url: str | None = None
) -> AsyncIterator[Engine]:
    async with build_store(ctx.db_url, ctx.box) as store:
        engine = build_engine(
            store, concurrency=concurrency, lease_s=lease_s, actor=ctx.actor, redis_url=redis_url
        )
        async with engine:
            yield engine


def _limit(args: argparse.Namespace, *, adding: bool) -> Limit | None:
    """The limit the flags ask for: None to remove, _UNCHANGED when none was given."""
    if getattr(args, "unlimited", False) or getattr(args, "clear", False):
        if args.rate is not None or args.burst is not None:
            raise ConfigError("give either --unlimited or --rate/--burst, not both.")
        return None
    if args.rate is None:
        if args.burst is not None:
            raise ConfigError("--burst needs --rate as well.")
        return None if adding else _UNCHANGED
    rate = parse_rate(args.rate)
    burst = args.burst if args.burst is not None else max(1.0, rate)
    return Limit(rate, burst)


# -- migrate -------------------------------------------------------------------------------


async def migrate(args: argparse.Namespace, ctx: Context) -> int:
    async with build_store(ctx.db_url, ctx.box) as store:
        revision = await store.migrate()
    print(f"store {masked_url(ctx.db_url)} is at revision {revision}")
    return 0


# -- tenants -------------------------------------------------------------------------------


async def tenant_add(args: argparse.Namespace, ctx: Context) -> int:
    limit = _limit(args, adding=True)
    async with open_engine(ctx) as engine:
        record = await engine.add_tenant(args.name, limit, enabled=args.enabled is not False)
    print(f"tenant {record.name} added: {fmt_limit(record.limit)}")
    return 0


async def tenant_set(args: argparse.Namespace, ctx: Context) -> int:
    limit = _limit(args, adding=False)
    if limit is _UNCHANGED and args.enabled is None:
        raise ConfigError(
            "nothing to change; give --rate/--burst, --unlimited, --enable or --disable."
        )
    changes: dict[str, Any] = {} if limit is _UNCHANGED else {"limit": limit}
    async with open_engine(ctx) as engine:
        record = await engine.update_tenant(args.name, enabled=args.enabled, **changes)
    state = "enabled" if record.enabled else "disabled"
    print(f"tenant {record.name}: {fmt_limit(record.limit)}, {state}")
    return 0


async def tenant_list(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        tenants = await engine.tenants()
    if args.json:
        print_json(
            [{"name": t.name, "limit": limit_json(t.limit), "enabled": t.enabled} for t in tenants]
        )
    else:
        print_table(
            ["TENANT", "LIMIT", "ENABLED"],
            [(t.name, fmt_limit(t.limit), "yes" if t.enabled else "no") for t in tenants],
        )
    return 0


# -- providers -----------------------------------------------------------------------------


async def provider_add(args: argparse.Namespace, ctx: Context) -> int:
    limit = _limit(args, adding=True)
    async with open_engine(ctx) as engine:
        record = await engine.add_provider(
            args.name, args.kind, limit, dict(args.option), dict(args.secret)
        )
    print(f"provider {record.name} ({record.kind}) added: {fmt_limit(record.limit)}")
    return 0


async def provider_set(args: argparse.Namespace, ctx: Context) -> int:
    limit = _limit(args, adding=False)
    if limit is _UNCHANGED and not (args.kind or args.option or args.secret):
        raise ConfigError("nothing to change; give --kind, --rate, --option or --secret.")
    changes: dict[str, Any] = {} if limit is _UNCHANGED else {"limit": limit}
    async with open_engine(ctx) as engine:
        record = await engine.update_provider(
            args.name,
            kind=args.kind,
            options=dict(args.option),
            secrets=dict(args.secret),
            **changes,
        )
    print(f"provider {record.name} ({record.kind}): {fmt_limit(record.limit)}")
    return 0


async def provider_list(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        providers = await engine.providers()
    if args.json:
        print_json(
            [
                {
                    "name": p.name,
                    "kind": p.kind,
                    "limit": limit_json(p.limit),
                    "options": p.options,
                    "secrets": dict.fromkeys(p.secret_names, "********"),
                }
                for p in providers
            ]
        )
        return 0
    rows = [
        (
            p.name,
            p.kind,
            fmt_limit(p.limit),
            " ".join(f"{k}={v}" for k, v in sorted(p.options.items())),
            " ".join(f"{k}=********" for k in p.secret_names),
        )
        for p in providers
    ]
    print_table(["PROVIDER", "KIND", "LIMIT", "OPTIONS", "SECRETS"], rows)
    return 0


async def provider_test(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        result = await engine.test_send(args.name, args.recipient)
    print(
        f"test send to {mask(args.recipient)} via {args.name}: {result.outcome.value}"
        + (f" ({result.detail})" if result.detail else "")
    )
    return 0 if result.outcome is Outcome.DELIVERED else 1


# -- limits --------------------------------------------------------------------------------


async def limit_set(args: argparse.Namespace, ctx: Context) -> int:
    limit = _limit(args, adding=False)
    if limit is _UNCHANGED:
        raise ConfigError("give --rate (and --burst), or --clear.")
    async with open_engine(ctx) as engine:
        await engine.set_pair_limit(args.tenant, args.provider, limit)
    print(f"limit of {args.tenant} on {args.provider}: {fmt_limit(limit)}")
    return 0


async def limit_list(args: argparse.Namespace, ctx: Context) -> int:
    async with build_store(ctx.db_url, ctx.box) as store:
        await store.ensure_current()
        pairs = await store.config.pair_limits()
    if args.json:
        print_json(
            [
                {"tenant": p.tenant, "provider": p.provider, "limit": limit_json(p.limit)}
                for p in pairs
            ]
        )
    else:
        print_table(
            ["TENANT", "PROVIDER", "LIMIT"],
            [(p.tenant, p.provider, fmt_limit(p.limit)) for p in pairs],
        )
    return 0


# -- enqueue -------------------------------------------------------------------------------

Item = tuple[str, str, dict[str, Any], str | None, int]

# The store's priority column is a 32-bit integer on Postgres.
_PRIORITY_MIN, _PRIORITY_MAX = -(2**31), 2**31 - 1
_KEY_MAX = 200


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _payload(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError as exc:  # JSONDecodeError, or NaN/Infinity
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ConfigError(f"{where}the payload is not valid JSON ({msg}).") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}the payload must be a JSON object.")
    return value


def _read_lines(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.read().splitlines()
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}.") from None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_priority(priority: int, where: str) -> None:
    if not _PRIORITY_MIN <= priority <= _PRIORITY_MAX:
        raise ConfigError(f"{where}the priority must be from {_PRIORITY_MIN} to {_PRIORITY_MAX}.")


def _parse_line(number: int, line: str) -> tuple[str, Item]:
    """One line of ``enqueue --file``, checked fully: a file is queued only when every line
    is good, and lines of different tenants are written in separate transactions."""
    where = f"line {number}: "
    try:
        obj = json.loads(line, parse_constant=_not_json)
    except ValueError as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ConfigError(f"{where}not valid JSON ({msg}).") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}expected a JSON object.")
    for field in ("tenant", "provider", "recipient"):
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ConfigError(f"{where}{field!r} must be a non-empty string.")
    payload = obj.get("payload", {})
    if not isinstance(payload, dict):
        raise ConfigError(f"{where}'payload' must be a JSON object.")
    key = obj.get("key")
    if key is not None and not (isinstance(key, str) and 0 < len(key) <= _KEY_MAX):
        raise ConfigError(f"{where}'key' must be a string of 1 to {_KEY_MAX} characters.")
    # A JSON escape such as "\udcff" has no UTF-8 form; found here, not after other lines
    # of the file were written.
    if not _is_text(obj["recipient"]) or not _is_text(key or ""):
        raise ConfigError(f"{where}'recipient' and 'key' must be valid Unicode text.")
    priority = obj.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigError(f"{where}'priority' must be a whole number.")
    _check_priority(priority, where)
    # A line without a key gets one from its content, so running a file twice adds nothing.
    key = key or "file-" + hashlib.sha256(line.strip().encode()).hexdigest()[:32]
    return obj["tenant"], (obj["provider"], obj["recipient"], payload, key, priority)


def _group(lines: Iterable[str]) -> dict[str, list[Item]]:
    by_tenant: dict[str, list[Item]] = {}
    for number, line in enumerate(lines, 1):
        if line.strip():
            tenant, item = _parse_line(number, line)
            by_tenant.setdefault(tenant, []).append(item)
    return by_tenant


async def enqueue(args: argparse.Namespace, ctx: Context) -> int:
    if args.file is not None:
        if args.tenant or args.provider or args.recipient or args.key:
            raise ConfigError("give either --file or TENANT PROVIDER RECIPIENT, not both.")
        return await _enqueue_file(args.file, ctx)
    if not (args.tenant and args.provider and args.recipient):
        raise ConfigError("enqueue needs TENANT PROVIDER RECIPIENT, or --file PATH.")
    payload = _payload(args.payload, "")
    _check_priority(args.priority, "")
    async with open_engine(ctx) as engine:
        result = await engine.enqueue(
            args.tenant,
            args.provider,
            args.recipient,
            payload,
            key=args.key,
            priority=args.priority,
        )
    word = "already queued as" if result.duplicate else "queued as"
    print(f"{word} {result.id} (key {result.idempotency_key})")
    return 0


async def _enqueue_file(path: str, ctx: Context) -> int:
    by_tenant = _group(_read_lines(path))
    async with open_engine(ctx) as engine:
        for tenant, items in by_tenant.items():  # check every name before writing anything
            for provider in {item[0] for item in items}:
                if engine.directory.provider_id(provider) is None:
                    raise NotFound(f"no provider named {provider!r}.")
            if engine.directory.tenant_id(tenant) is None:
                raise NotFound(f"no tenant named {tenant!r}.")
        fresh = duplicates = 0
        for tenant, items in by_tenant.items():
            results = await engine.enqueue_many(tenant, items)
            duplicates += sum(r.duplicate for r in results)
            fresh += sum(not r.duplicate for r in results)
    print(f"queued {fresh}, already queued {duplicates}")
    return 0


# -- worker and simulation -----------------------------------------------------------------


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Any:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _run_until(engine: Engine, waits: list[asyncio.Future[Any]], quiet: bool) -> None:
    stop = asyncio.Event()
    with _stop_on_signals(stop):
        tasks = [
            *waits,
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(engine.wait_stopped()),
        ]
        progress = None if quiet else asyncio.ensure_future(report_progress(engine))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, *([progress] if progress else [])]:
                task.cancel()
            await asyncio.gather(*tasks, *([progress] if progress else []), return_exceptions=True)


async def worker(args: argparse.Namespace, ctx: Context) -> int:
    start = time.monotonic()
    async with open_engine(
        ctx, concurrency=args.concurrency, lease_s=args.lease_s, redis_url=args.redis
    ) as engine:
        await engine.start()
        if not args.quiet:
            print(
                f"worker {engine.worker_id} on {masked_url(ctx.db_url)}, "
                f"concurrency {args.concurrency}",
                file=sys.stderr,
            )
        waits: list[asyncio.Future[Any]] = []
        if args.until_empty:
            waits.append(asyncio.ensure_future(engine.run_until_empty()))
        if args.duration:
            waits.append(asyncio.ensure_future(asyncio.sleep(args.duration)))
        await _run_until(engine, waits, args.quiet)
        await engine.stop()
        snap = await engine.snapshot()
    print(summary_line(snap, time.monotonic() - start))
    if engine.failure:
        print(f"omnipost: the worker stopped: {engine.failure}", file=sys.stderr)
        return 1
    return 0


async def simulate(args: argparse.Namespace, ctx: Context) -> int:
    tenants = [t.strip() for t in args.tenant.split(",") if t.strip()]
    if not tenants:
        raise ConfigError("name at least one tenant.")
    start = time.monotonic()
    async with open_engine(ctx, concurrency=args.concurrency, redis_url=args.redis) as engine:
        # Every name is checked before the engine starts, so bad input dispatches nothing.
        for tenant in tenants:
            await engine.notifications(tenant, limit=1)
        if engine.directory.provider_id(args.provider) is None:
            raise NotFound(f"no provider named {args.provider!r}.")
        if not args.no_dispatch:
            await engine.start()
        sim = asyncio.ensure_future(
            engine.simulate(
                tenants,
                args.provider,
                args.count,
                pattern=Pattern(args.pattern),
                duration_s=args.duration,
            )
        )
        waits: list[asyncio.Future[Any]] = [sim]
        if not args.no_dispatch:
            waits = [asyncio.ensure_future(_after(sim, engine.run_until_empty))]
        await _run_until(engine, waits, quiet=False)
        if sim.done() and not sim.cancelled() and sim.exception() is not None:
            raise sim.exception()  # type: ignore[misc]
        await engine.stop()
        snap = await engine.snapshot()
    print(summary_line(snap, time.monotonic() - start))
    return 1 if engine.failure else 0


async def _after(first: asyncio.Future[Any], then: Callable[[], Awaitable[Any]]) -> Any:
    await first
    return await then()


async def demo(args: argparse.Namespace, ctx: Context) -> int:
    """Create demo tenants and simulated providers (once), then run a live burst."""
    async with build_store(ctx.db_url, ctx.box) as store:
        await store.migrate()
    async with open_engine(ctx, concurrency=32) as engine:
        await seed_demo(engine)
    print(
        "demo: tenants acme (50/s), globex (20/s), initech (unlimited); provider sms-sim (60/s)",
        file=sys.stderr,
    )
    sim_args = argparse.Namespace(
        tenant="acme,globex,initech",
        provider="sms-sim",
        count=args.count,
        pattern="spike",
        duration=0.0,
        concurrency=32,
        no_dispatch=False,
        redis=None,
    )
    return await simulate(sim_args, ctx)


# -- stats and dead letters ----------------------------------------------------------------


async def stats(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx, redis_url=args.redis) as engine:
        snap = await engine.snapshot(with_workers=True)
        since = time.time() - 60
        recent = await engine.store.stats.outcomes_since(since)
        tenants = await engine.tenants()
        providers = await engine.providers()
        workers = await engine.workers()
        retention = await engine.retention()
    if args.json:
        print_json(
            {
                "store": masked_url(ctx.db_url),
                "depth": [_depth_json(d) for d in snap.depth],
                "last_60s": {o.value: n for o, n in recent.items()},
                "delivered_per_s_60s": recent[Outcome.DELIVERED] / 60,
                "workers": [
                    {
                        "id": w.id,
                        "host": w.host,
                        "pid": w.pid,
                        "state": w.state,
                        "concurrency": w.concurrency,
                        "delivered": w.delivered,
                        "heartbeat_at": w.heartbeat_at,
                    }
                    for w in workers
                ],
                "limiter": {
                    "backend": snap.limiter_backend,
                    "buckets": _bucket_levels(snap),
                },
                "limits": {
                    **{f"tenant:{t.name}": limit_json(t.limit) for t in tenants},
                    **{f"provider:{p.name}": limit_json(p.limit) for p in providers},
                },
                "retention": retention_json(retention),
            }
        )
        return 0
    print(f"store {masked_url(ctx.db_url)}")
    print_table(
        ["TENANT", "QUEUED", "IN FLIGHT", "DELIVERED", "DEAD", "OLDEST QUEUED"],
        [
            (
                d.tenant,
                d.queued,
                d.leased,
                d.delivered,
                d.dead,
                "-" if d.oldest_queued_age_s is None else f"{d.oldest_queued_age_s:.1f}s",
            )
            for d in snap.depth
        ],
    )
    print(
        "last 60 s: "
        + ", ".join(f"{o.value} {n}" for o, n in recent.items())
        + f" ({recent[Outcome.DELIVERED] / 60:.1f} delivered/s)"
    )
    print(f"retention: {fmt_retention(retention)}")
    print(f"live workers: {len(workers)}")
    for w in workers:
        print(f"  {w.id} state {w.state} concurrency {w.concurrency} delivered {w.delivered}")
    levels = _bucket_levels(snap)
    if levels is None:
        print("limiter: local to each worker (pass --redis to read shared bucket levels)")
        return 0
    note = (
        " - REDIS UNREACHABLE, each worker uses its share locally"
        if snap.limiter_backend == "local-fallback"
        else ""
    )
    print(f"limiter: {snap.limiter_backend}{note}")
    print_table(
        ["BUCKET", "TOKENS", "BURST", "RATE/S"],
        [(b["bucket"], f"{b['tokens']:.1f}", b["burst"], b["rate_per_s"]) for b in levels],
    )
    return 0


def _bucket_levels(snap: Any) -> list[dict[str, Any]] | None:
    """Shared bucket levels, or None when buckets live in each worker (nothing to read here)."""
    if snap.limiter_backend == "local":
        return None
    return [
        {"bucket": str(b.key), "tokens": b.tokens, "burst": b.burst, "rate_per_s": b.rate_per_s}
        for b in snap.buckets
    ]


def _depth_json(d: Any) -> dict[str, Any]:
    return {
        "tenant": d.tenant,
        "queued": d.queued,
        "leased": d.leased,
        "delivered": d.delivered,
        "dead": d.dead,
        "oldest_queued_age_s": d.oldest_queued_age_s,
    }


async def dead_list(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        rows = await engine.dead(args.tenant)
        names = {p.id: p.name for p in await engine.providers()}
    if args.json:
        print_json(
            [
                {
                    "id": v.id,
                    "tenant": t,
                    "provider": names.get(v.provider_id),
                    "recipient": v.recipient_masked,
                    "key": v.idempotency_key,
                    "failures": v.failures,
                    "attempt": v.attempt,
                    "error": v.last_error,
                    "finished_at": v.finished_at,
                }
                for t, v in rows
            ]
        )
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


async def _dead_action(args: argparse.Namespace, ctx: Context, retry: bool) -> int:
    if bool(args.ids) == bool(args.all):
        raise ConfigError("give the IDs of dead notifications, or --all.")
    ids = None if args.all else list(args.ids)
    async with open_engine(ctx) as engine:
        if retry:
            count = await engine.retry_dead(ids, tenant=args.tenant)
        else:
            count = await engine.discard_dead(ids, tenant=args.tenant)
    verb = "queued again" if retry else "discarded"
    print(f"{count} dead notification{'s' if count != 1 else ''} {verb}")
    if ids is not None and count < len(set(ids)):
        print(
            f"omnipost: {len(set(ids)) - count} of the IDs are not dead notifications"
            + (f" of {args.tenant}" if args.tenant else "")
            + ".",
            file=sys.stderr,
        )
        return 2
    return 0


async def dead_retry(args: argparse.Namespace, ctx: Context) -> int:
    return await _dead_action(args, ctx, retry=True)


async def dead_discard(args: argparse.Namespace, ctx: Context) -> int:
    return await _dead_action(args, ctx, retry=False)


# -- retention -----------------------------------------------------------------------------


async def retention_show(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        retention = await engine.retention()
        size = await engine.store_size()
        pruned_at = await engine.last_pruned_at()
    if args.json:
        print_json(
            {
                "store": masked_url(ctx.db_url),
                "retention": retention_json(retention),
                "size": {
                    "used_bytes": size.used_bytes,
                    "free_bytes": size.free_bytes,
                    "notifications": size.notifications,
                },
                "last_pruned_at": pruned_at,
            }
        )
        return 0
    print(f"store {masked_url(ctx.db_url)}")
    print_table(
        ["WINDOW", "KEPT FOR", "WHAT"],
        [
            (name, format_age(getattr(retention, field)), keeps)
            for name, field, keeps in RETENTION_WINDOWS
        ],
    )
    print(f"size: {_fmt_size(size)}")
    print(f"last prune: {_fmt_time(pruned_at)}")
    return 0


def _fmt_size(size: StoreSize) -> str:
    free = "" if size.free_bytes is None else f" ({fmt_bytes(size.free_bytes)} free)"
    kept = f"{size.notifications} notification{'s' if size.notifications != 1 else ''} kept"
    return f"{fmt_bytes(size.used_bytes)}{free}, {kept}"


def _fmt_time(unix_s: float | None) -> str:
    if unix_s is None:
        return "never"
    return datetime.fromtimestamp(unix_s).astimezone().isoformat(sep=" ", timespec="seconds")


async def retention_set(args: argparse.Namespace, ctx: Context) -> int:
    ages = {field: getattr(args, field) for _, field, _ in RETENTION_WINDOWS if field in args}
    if not ages:
        raise ConfigError("nothing to change; give --delivered, --dead, --log or --audit.")
    async with open_engine(ctx) as engine:
        retention = await engine.set_retention(**ages)
    print(f"retention: {fmt_retention(retention)}")
    return 0


async def prune(args: argparse.Namespace, ctx: Context) -> int:
    async with open_engine(ctx) as engine:
        retention = await engine.retention()
        report = await engine.prune(dry_run=args.dry_run)
    if args.json:
        print_json(_prune_json(report))
        return 0
    print(f"retention: {fmt_retention(retention)}")
    print_table(
        ["ROWS", "WOULD DELETE" if report.dry_run else "DELETED"],
        [
            ("delivered notifications", report.delivered),
            ("dead notifications", report.dead),
            ("delivery-log rows", report.delivery_log),
            ("audit-log rows", report.audit_log),
        ],
    )
    if report.freed_bytes:  # SQLite's free pages; Postgres keeps the space for reuse
        print(f"given back to the file system: {fmt_bytes(report.freed_bytes)}")
    return 0


def _prune_json(report: PruneReport) -> dict[str, int | bool]:
    return {
        "delivered": report.delivered,
        "dead": report.dead,
        "delivery_log": report.delivery_log,
        "audit_log": report.audit_log,
        "freed_bytes": report.freed_bytes,
        "dry_run": report.dry_run,
    }


__all__ = ["Context", "open_engine"]
