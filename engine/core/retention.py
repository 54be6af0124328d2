"""How long the store keeps what is finished: the windows, their text form, a pass's report.

Pure values and parsing; the store deletes (``engine.store.maintenance``) and the engine
schedules (``Engine``). A window of ``None`` keeps rows forever.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace

from engine.core.errors import ConfigError

__all__ = ["DEFAULT_RETENTION", "PruneReport", "Retention", "format_age", "parse_age"]

_DAY_S = 86400.0
_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": _DAY_S, "w": 7 * _DAY_S}
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_ZERO = re.compile(r"0+(?:\.0*)?\s*[smhdw]?")
_LONGEST_S = 100 * 365 * _DAY_S


@dataclass(frozen=True, slots=True)
class Retention:
    """Ages after which finished rows are deleted, in seconds; ``None`` keeps them forever.

    ``delivered_s``: delivered notifications, by when they were delivered. ``dead_s``: dead
    letters, by when they died (so an operator has this long to retry them), and cancelled and
    suppressed notifications, by when they ended. ``log_s``: the delivery log. ``audit_s``:
    the audit log. ``suppressions_s``: the tenants' suppression lists, by when a recipient was
    put on one (a phone number is given to someone else after a while). Queued and leased
    notifications are never deleted, whatever their age. An idempotency key is remembered as
    long as its notification is kept."""

    delivered_s: float | None = 7 * _DAY_S
    dead_s: float | None = 30 * _DAY_S
    log_s: float | None = 7 * _DAY_S
    audit_s: float | None = 90 * _DAY_S
    suppressions_s: float | None = 365 * _DAY_S

    def changed(self, **ages: float | None) -> Retention:
        """A copy with the given windows replaced, each checked."""
        for name, value in ages.items():
            _check(name, value)
        return replace(self, **ages)

    def as_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> Retention:
        """From ``as_dict`` output (the store's copy); unknown or bad entries keep the default."""
        known = {f.name for f in fields(cls)}
        ages: dict[str, float | None] = {}
        for name, value in values.items():
            if name in known and (value is None or isinstance(value, int | float)):
                ages[name] = None if value is None else float(value)
        try:
            return cls().changed(**ages)
        except ConfigError:
            return cls()


DEFAULT_RETENTION = Retention()


_WHAT = {
    "delivered_s": "delivered notifications",
    "dead_s": "dead letters",
    "log_s": "the delivery log",
    "audit_s": "the audit log",
    "suppressions_s": "suppressed recipients",
}


def _check(name: str, value: float | None) -> None:
    if name not in _WHAT:
        raise ConfigError(f"there is no retention window named {name!r}.")
    if value is None:
        return
    if not math.isfinite(value) or value <= 0 or value > _LONGEST_S:
        raise ConfigError(
            f"the retention of {_WHAT[name]} must be a positive age of at most 100 years, "
            "or forever."
        )


def parse_age(text: str) -> float | None:
    """``12h``, ``7d``, ``90m``, ``2w``, ``1d12h``, ``3600s`` -> seconds; ``0`` (with or
    without a unit) or ``forever`` -> None (keep forever). Raises ConfigError with one sentence
    otherwise."""
    cleaned = text.strip().lower()
    if cleaned == "forever" or _ZERO.fullmatch(cleaned):
        return None
    total = 0.0
    at = 0
    for match in _AGE.finditer(cleaned):
        if cleaned[at : match.start()].strip():
            break
        total += float(match.group(1)) * _UNITS_S[match.group(2)]
        at = match.end()
    else:
        if at and not cleaned[at:].strip() and total <= _LONGEST_S:
            return total or None
    raise ConfigError(
        f"age {text!r} is not valid; use a number with s, m, h, d or w (like 12h or 7d), "
        "or 0 to keep forever."
    )


def format_age(seconds: float | None) -> str:
    """Text ``parse_age`` reads back exactly, in the largest whole unit up to days: ``7d``,
    ``14d``, ``36h``, ``90m``, ``forever``."""
    if seconds is None:
        return "forever"
    for unit in ("d", "h", "m"):
        count = seconds / _UNITS_S[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one pass deleted (or, with ``dry_run``, would delete), per kind of row."""

    delivered: int = 0
    dead: int = 0
    delivery_log: int = 0
    audit_log: int = 0
    cancelled: int = 0  # by the dead letters' window; last, so that positions keep their meaning
    api_requests: int = 0  # HTTP idempotency keys whose notification is gone
    suppressed: int = 0  # suppressed notifications, by the dead letters' window
    suppressions: int = 0  # recipients taken off the suppression lists
    expired: int = 0  # notifications past their deadline, unsent, by the dead letters' window
    status_events: int = 0  # events delivered or given up, by the delivery log's window
    dry_run: bool = False
    complete: bool = True  # False when a background pass stopped at its time budget
    freed_bytes: int = 0  # SQLite pages given back to the file system

    @property
    def total(self) -> int:
        return (
            self.delivered
            + self.dead
            + self.cancelled
            + self.delivery_log
            + self.audit_log
            + self.api_requests
            + self.suppressed
            + self.suppressions
            + self.expired
            + self.status_events
        )
