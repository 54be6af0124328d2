"""How engine values read to people, one form for the CLI and the console alike.

Formatting otherwise belongs to each front end; these few live here because the CLI (which
must not import Qt) and the console (which must not import ``app``) both print them, and
an operator should see the same text in both.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from engine.core.domain import Limit

__all__ = ["MASKED_VALUE", "fmt_limit", "masked_secrets", "rfc3339"]

# What stands for a secret's value wherever one is listed: a fixed width, so not even its
# length shows.
MASKED_VALUE = "********"


def fmt_limit(limit: Limit | None) -> str:
    """``10/s burst 5``, or ``unlimited`` for None."""
    return "unlimited" if limit is None else str(limit)


def masked_secrets(names: Iterable[str]) -> dict[str, str]:
    """Each secret's name with ``MASKED_VALUE`` for its value."""
    return dict.fromkeys(names, MASKED_VALUE)


def rfc3339(at: float, timespec: str = "auto") -> str:
    """Unix seconds as RFC 3339 in UTC, the offset written ``Z``: ``2026-12-07T08:00:00Z``
    (``timespec`` as ``datetime.isoformat`` takes it: ``milliseconds`` for a header)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
