"""Printing for the CLI: aligned tables for people, JSON for scripts. Secrets never reach here
unmasked: callers pass masked values."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from engine import Limit

__all__ = ["fmt_limit", "print_json", "print_table"]


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


def fmt_limit(limit: Limit | None) -> str:
    return "unlimited" if limit is None else f"{limit.rate_per_s:g}/s burst {limit.burst:g}"


def limit_json(limit: Limit | None) -> dict[str, float] | None:
    return None if limit is None else {"rate_per_s": limit.rate_per_s, "burst": limit.burst}
