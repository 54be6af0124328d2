"""How the console writes numbers for people: rates, durations, ages, counts, limits, sizes."""

from __future__ import annotations

import math
import time

from engine import (
    BucketKey,
    fmt_limit,  # the CLI's form too
)

__all__ = [
    "fmt_age",
    "fmt_bucket",
    "fmt_bytes",
    "fmt_clock",
    "fmt_count",
    "fmt_duration",
    "fmt_latency",
    "fmt_limit",
    "fmt_rate",
    "fmt_when",
]


def fmt_rate(rate_per_s: float | None) -> str:
    """``12/s``, ``0.5/s``, ``2/min`` below one a second... ``unlimited`` for None."""
    if rate_per_s is None:
        return "unlimited"
    if rate_per_s >= 1 or rate_per_s == 0:
        return f"{rate_per_s:.3g}/s"
    if rate_per_s * 60 >= 1:
        return f"{rate_per_s * 60:.3g}/min"
    return f"{rate_per_s * 3600:.3g}/h"


def fmt_duration(seconds: float | None) -> str:
    """``850 ms``, ``4.2 s``, ``3 min 20 s``, ``2 h 5 min``; ``—`` for None."""
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, secs = divmod(round(seconds), 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours} h {rest // 60} min"


def fmt_latency(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else fmt_duration(seconds)


def fmt_age(ts: float | None, now: float | None = None) -> str:
    """How long ago ``ts`` (unix s) was: ``12 s ago``; ``—`` for None."""
    if ts is None:
        return "—"
    age = max(0.0, (time.time() if now is None else now) - ts)
    return "just now" if age < 1 else f"{fmt_duration(age)} ago"


def fmt_clock(ts: float) -> str:
    """Local time of day with milliseconds: ``14:03:07.125``."""
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def fmt_when(ts: float | None) -> str:
    """Local date and time to the second: ``2025-03-04 14:03:07``; ``never`` for None."""
    if ts is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def fmt_bytes(n: int) -> str:
    """``512 B``, ``12.3 KiB``, ``4.5 MiB``, ``1.2 GiB``, ``3.0 TiB`` (powers of 1024)."""
    if abs(n) < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def fmt_count(n: float) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    if abs(n) < 1000:
        return f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}"
    if abs(n) < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def fmt_bucket(key: BucketKey) -> str:
    """``tenant acme``, ``provider sms``, ``acme → sms``."""
    if key.tenant and key.provider:
        return f"{key.tenant} → {key.provider}"
    if key.tenant:
        return f"tenant {key.tenant}"
    return f"provider {key.provider}"
