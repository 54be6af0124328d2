"""Retention commands: show and set how long finished work is kept, and prune now."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from app.as_json import prune_json, retention_json, size_json
from app.commands.base import open_engine
from app.output import RETENTION_WINDOWS, fmt_bytes, fmt_retention, print_json, print_table
from app.session import Context
from engine import StoreSize, format_age, masked_url

__all__ = ["prune", "retention_set", "retention_show"]


async def retention_show(ctx: Context, *, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        retention = await engine.retention()
        size = await engine.store_size()
        pruned_at = await engine.pruned_at()
    if as_json:
        print_json(
            {
                "store": masked_url(ctx.db_url),
                "retention": retention_json(retention),
                "size": size_json(size),
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


async def retention_set(ctx: Context, ages: Mapping[str, float | None]) -> int:
    """Change the windows named in ``ages`` (fields of Retention, in seconds; None: forever)."""
    async with open_engine(ctx) as engine:
        retention = await engine.retention_set(**ages)
    print(f"retention: {fmt_retention(retention)}")
    return 0


async def prune(ctx: Context, *, dry_run: bool = False, as_json: bool = False) -> int:
    async with open_engine(ctx) as engine:
        retention = await engine.retention()
        report = await engine.prune(dry_run=dry_run)
    if as_json:
        print_json(prune_json(report))
        return 0
    print(f"retention: {fmt_retention(retention)}")
    print_table(
        ["ROWS", "WOULD DELETE" if report.dry_run else "DELETED"],
        [
            ("delivered notifications", report.delivered),
            ("dead notifications", report.dead),
            ("cancelled notifications", report.cancelled),
            ("suppressed notifications", report.suppressed),
            ("expired notifications", report.expired),
            ("delivery-log rows", report.delivery_log),
            ("status events sent or given up", report.status_events),
            ("audit-log rows", report.audit_log),
            ("HTTP idempotency keys", report.api_requests),
            ("suppressed recipients", report.suppressions),
        ],
    )
    if report.freed_bytes:  # SQLite's free pages; Postgres keeps the space for reuse
        print(f"given back to the file system: {fmt_bytes(report.freed_bytes)}")
    return 0
