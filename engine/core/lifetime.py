"""A notification's useful life as its caller states it: when it may go (``send_at``) and until
when it is worth sending (``expires_at``, or ``ttl_s`` counted from its send time), both as
unix seconds, resolved against the engine's clock. Pure: the engine, the HTTP API and the
command line all go through ``lifetimes``.

- A send time in the past, or none, is now; one further ahead than ``most_ahead_s`` is refused.
- ``ttl_s`` counts from the send time (now, for one in the past); ``expires_at`` and ``ttl_s``
  together are refused; a deadline not after the send time is refused.
- Given neither, the notification takes its default (the tenant's, else its provider's), if
  any.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime

from engine.core.domain import EnqueueItem
from engine.core.errors import ConfigError, ItemRefused

__all__ = ["Lifetime", "lifetimes", "parse_duration", "parse_time"]

Lifetime = tuple[float | None, float | None]  # (send at, expires at); None: now, and never


def lifetimes(
    items: Sequence[EnqueueItem],
    now: float,
    *,
    most_ahead_s: float,
    default_ttl_s: Callable[[str], float | None] = lambda _provider: None,
) -> list[Lifetime] | None:
    """Each item's (send at, expires at), None where it is now or never; None for the whole
    call when no item has either (nearly always: no list to build). ``default_ttl_s(provider
    name)``: the deadline of an item that names none, in seconds after its send time. Raises
    ``ItemRefused`` (index and field) for the first item refused."""
    found: list[Lifetime] = []
    any_time = False
    for index, item in enumerate(items):
        send_at, expires_at, ttl_s = item[5], item[6], item[7]
        if expires_at is None and ttl_s is None:
            ttl_s = default_ttl_s(item[0])
        if send_at is None and expires_at is None and ttl_s is None:
            found.append((None, None))
            continue
        any_time = True
        found.append(_one(index, send_at, expires_at, ttl_s, now, most_ahead_s))
    return found if any_time else None


def _one(
    index: int,
    send_at: float | None,
    expires_at: float | None,
    ttl_s: float | None,
    now: float,
    most_ahead_s: float,
) -> Lifetime:
    if send_at is not None:
        if not _finite(send_at):
            raise ItemRefused(index, "send_at", "the send time must be a time.")
        if send_at - now > most_ahead_s:
            days = most_ahead_s / 86400
            raise ItemRefused(
                index,
                "send_at",
                f"the send time is more than {days:g} days ahead; a notification may be "
                f"scheduled at most {days:g} days ahead.",
            )
        if send_at <= now:
            send_at = None  # it goes now
    start = now if send_at is None else send_at
    if expires_at is not None and ttl_s is not None:
        raise ItemRefused(
            index, "ttl_s", "give a deadline (expires_at) or a TTL (ttl_s), not both."
        )
    if ttl_s is not None:
        if not _finite(ttl_s) or ttl_s <= 0:
            raise ItemRefused(index, "ttl_s", "the TTL must be a number of seconds above 0.")
        expires_at = start + ttl_s
    elif expires_at is not None:
        if not _finite(expires_at):
            raise ItemRefused(index, "expires_at", "the deadline must be a time.")
        if expires_at <= start:
            said = "must come after the send time" if send_at is not None else "has passed"
            raise ItemRefused(index, "expires_at", f"the deadline {said}.")
    return send_at, expires_at


def _finite(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|sec|m|min|h|hr|d)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}
_UNIT_S["d"] = 86400.0


def parse_duration(text: str, what: str = "a duration") -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"2h"`` or ``"1d"`` as seconds, above 0; ``ConfigError``
    (one sentence naming ``what``) for anything else."""
    match = _DURATION.match(text)
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not match or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(
            f"cannot read {text[:40]!r} as {what}; write seconds above 0 as N, Ns, Nm, Nh or Nd."
        )
    return seconds


def parse_time(text: str, what: str = "the time") -> float:
    """An RFC 3339 time with an offset (``2026-12-07T09:00:00+01:00``, ``...Z``) as unix
    seconds; ``ConfigError`` for anything else, a time without an offset included (whose
    instant depends on where it is read)."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"cannot read {text[:40]!r} as {what}; write it as RFC 3339 with an offset, "
            "such as 2026-12-07T09:00:00+01:00 or 2026-12-07T08:00:00Z."
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise ConfigError(f"{what} {text[:40]!r} has no offset; add one, such as +01:00 or Z.")
    return at.timestamp()
