"""Tenants as JSON lines: what ``omnipost tenant import`` and the console's import read, and
``omnipost tenant export`` writes.

One line is one object, ``{"name": "acme", "rate": "300/min", "burst": 10, "enabled": true}``.
``rate`` and ``burst`` mean what ``tenant add``'s ``--rate`` and ``--burst`` mean (``limit_of``
reads both): a rate is text such as ``"50/s"`` or a number per second; no rate is unlimited,
and a burst needs a rate. ``enabled`` is true unless given. ``api_rate``, ``api_burst`` and
``max_queued`` are the HTTP API's request limit per key and queue cap, as ``tenant set``'s
``--api-rate``, ``--api-burst`` and ``--max-queued`` (absent: the server's defaults). Blank
lines are skipped. What
``tenant_line`` writes, ``parse_tenant_lines`` reads back to the same tenant, to the last bit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

from engine.core.domain import Limit, limit_of, parse_rate
from engine.core.errors import ConfigError
from engine.store import TenantRecord, TenantSpec
from engine.store.tenant_bulk import TenantNames

__all__ = [
    "load_json",
    "parse_tenant_lines",
    "rate_text",
    "read_tenant_file",
    "read_text_lines",
    "tenant_line",
]

_FIELDS = ("name", "rate", "burst", "enabled", "api_rate", "api_burst", "max_queued")
# Rates written as a whole number per second, minute or hour when one reads back exactly; the
# bound keeps "1e300/s" from being written out in 301 digits.
_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0))
_WHOLE_MAX = 10**15


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# One decoder for every line: ``json.loads`` with an argument builds a new one per call, a
# quarter of the time of reading a tenant line.
_DECODER = json.JSONDecoder(parse_constant=_not_json)


def load_json(text: str) -> Any:
    """``json.loads``, refusing NaN and Infinity (Python writes them, JSON has no such thing);
    raises ValueError with a short reason."""
    if text.startswith("\ufeff"):  # as json.loads says it
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    try:
        return _DECODER.decode(text)
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, or an integer of 4,300+ digits
        raise ValueError(exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)) from None


def read_text_lines(path: str | Path) -> list[str]:
    """The lines of the UTF-8 text file at ``path``; ``ConfigError`` when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"cannot read {path}: {reason}.") from None


def read_tenant_file(path: str | Path) -> list[TenantSpec]:
    """The tenants of the JSON-lines file at ``path``, as ``parse_tenant_lines`` reads them."""
    return parse_tenant_lines(read_text_lines(path))


def parse_tenant_lines(lines: Iterable[str]) -> list[TenantSpec]:
    """The tenant of every line that is not blank, each with its line number (from 1).

    Every line is checked before this returns: the first bad one (not JSON, not an object, a
    field unknown or of the wrong type, a rate, burst or name ``tenant add`` would refuse, a
    name an earlier line has) raises ``ConfigError``, one sentence starting ``line N:``."""
    specs: list[TenantSpec] = []
    names = TenantNames()
    for number, text in enumerate(lines, 1):
        if text.strip():
            spec = _spec(number, text)
            names.add(spec)
            specs.append(spec)
    return specs


def _spec(number: int, text: str) -> TenantSpec:
    where = f"line {number}: "
    try:
        value = load_json(text)
    except ValueError as exc:
        raise ConfigError(f"{where}not valid JSON ({exc}).") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}expected a JSON object.")
    try:
        return _spec_of(value, number)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc.message}") from None


def _spec_of(value: dict[str, Any], line: int) -> TenantSpec:
    unknown = [key for key in value if key not in _FIELDS]
    if unknown:
        raise ConfigError(
            f"unknown field {unknown[0][:40]!r}; a line has name, rate, burst, enabled, "
            "api_rate, api_burst and max_queued."
        )
    name = value.get("name")
    if not isinstance(name, str):
        raise ConfigError("'name' must be a string." if "name" in value else "'name' is missing.")
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("'enabled' must be true or false.")
    return TenantSpec(
        name,
        _limit(value.get("rate"), value.get("burst")),
        enabled,
        line,
        _api_limit(value.get("api_rate"), value.get("api_burst")),
        _max_queued(value.get("max_queued")),
    )


def _api_limit(rate: object, burst: object) -> Limit | None:
    """A line's ``api_rate`` and ``api_burst``, read as ``tenant set --api-rate`` reads them
    (no burst: two seconds' worth); absent: the server's default."""
    if rate is None:
        if burst is not None:
            raise ConfigError("'api_burst' needs 'api_rate' as well.")
        return None
    if _is_number(rate):
        rate = repr(rate)
    if not isinstance(rate, str):
        raise ConfigError("'api_rate' must be text such as \"50/s\", or a number.")
    per_s = limit_of(rate).rate_per_s
    given = _burst(burst)
    return limit_of(rate, given if given is not None else max(1.0, 2 * per_s))


def _max_queued(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError("'max_queued' must be a whole number of at least 1.")
    return value


def _limit(rate: object, burst: object) -> Limit | None:
    """The limit of a line's ``rate`` and ``burst`` (absent or null: not given)."""
    if rate is None:
        if burst is not None:
            raise ConfigError("'burst' needs 'rate' as well; no rate is unlimited.")
        return None
    if _is_number(rate):
        rate = repr(rate)  # a number is per second, as `--rate 5` is
    if not isinstance(rate, str):
        raise ConfigError('\'rate\' must be text such as "50/s" or "300/min", or a number.')
    return limit_of(rate, _burst(burst))


def _burst(burst: object) -> float | None:
    if burst is None:
        return None
    if not _is_number(burst):
        raise ConfigError("'burst' must be a number.")
    try:
        return float(burst)
    except OverflowError:  # an integer too large for a float
        raise ConfigError("'burst' is too large; it must be a finite number.") from None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def tenant_line(tenant: TenantRecord) -> str:
    """``tenant`` as one JSON line, without its newline: an unlimited tenant has no rate or
    burst; ``enabled`` is always there, so an import with ``--update`` sets it back."""
    line: dict[str, Any] = {"name": tenant.name}
    if tenant.limit is not None:
        line["rate"] = rate_text(tenant.limit.rate_per_s)
        line["burst"] = _plain(tenant.limit.burst)
    line["enabled"] = tenant.enabled
    if tenant.api_limit is not None:
        line["api_rate"] = rate_text(tenant.api_limit.rate_per_s)
        line["api_burst"] = _plain(tenant.api_limit.burst)
    if tenant.max_queued is not None:
        line["max_queued"] = tenant.max_queued
    return json.dumps(line)


def rate_text(per_s: float) -> str:
    """``per_s`` as text ``parse_rate`` reads back to exactly ``per_s``: a whole number per
    second, minute or hour when one does (``"300/min"``), else the float per second."""
    for unit, seconds in _UNITS:
        count = round(per_s * seconds)
        if 1 <= count <= _WHOLE_MAX:
            text = f"{count}/{unit}"
            if parse_rate(text) == per_s:
                return text
    return f"{per_s!r}/s"  # repr is the shortest text that reads back to the same float


def _plain(number: float) -> float | int:
    """A whole burst as an integer (``10``, not ``10.0``); both read back to the same float."""
    return int(number) if number.is_integer() and abs(number) <= _WHOLE_MAX else number
