"""Printing for the CLI: aligned tables and short texts for people, JSON for scripts (each
record's JSON form is in ``app.as_json``). Secrets never reach here unmasked: callers pass
masked values."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from engine import Retention, format_age

__all__ = [
    "RETENTION_WINDOWS",
    "fmt_bytes",
    "fmt_change",
    "fmt_duration",
    "fmt_retention",
    "print_json",
    "print_table",
]

# Each retention window: its name on the command line, its field in Retention, what it keeps.
RETENTION_WINDOWS = (
    ("delivered", "delivered_s", "delivered notifications, counted from delivery"),
    (
        "dead",
        "dead_s",
        "dead letters, cancelled, suppressed and expired notifications, counted from when they "
        "ended",
    ),
    ("log", "log_s", "delivery-log rows"),
    ("audit", "audit_s", "audit-log rows"),
    ("suppressions", "suppressions_s", "suppressed recipients, counted from when they were added"),
)
_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def fmt_retention(retention: Retention) -> str:
    """``delivered 7d, dead 30d, log 7d, audit 90d``."""
    return ", ".join(
        f"{name} {format_age(getattr(retention, field))}" for name, field, _ in RETENTION_WINDOWS
    )


def fmt_bytes(count: int) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``: binary units, one decimal."""
    value, unit = float(count), "B"
    for bigger in _BYTE_UNITS:
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"


def fmt_duration(seconds: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``2h03m``, ``3d04h``; ``-`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 0:
        return f"-{fmt_duration(-seconds)}"
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f}ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    minutes = round(seconds / 60)
    if minutes < 24 * 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    hours = round(seconds / 3600)
    return f"{hours // 24}d{hours % 24:02d}h"


def fmt_change(before_s: float | None, after_s: float | None) -> str:
    """How a duration changed: ``-2.4s (-49%)``, ``+12.3s``; ``-`` when either is unknown."""
    if before_s is None or after_s is None:
        return "-"
    delta = after_s - before_s
    if fmt_duration(abs(delta)) in ("0ms", "0.0s"):
        return "no change"
    sign = "+" if delta > 0 else "-"
    text = f"{sign}{fmt_duration(abs(delta))}"
    return f"{text} ({delta / before_s:+.0%})" if before_s > 0 else text
