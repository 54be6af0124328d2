"""Reading what ``enqueue`` is given: a payload, a priority, or a file of JSON lines, each
checked fully before anything is queued."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from typing import Any

from engine import ConfigError, EnqueueItem, load_json, parse_time, read_text_lines

__all__ = ["check_priority", "parse_payload", "read_batch", "read_lines"]

# The store's priority column is a 32-bit integer on Postgres.
_PRIORITY_MIN, _PRIORITY_MAX = -(2**31), 2**31 - 1
_KEY_MAX = 200


def parse_payload(text: str, where: str = "") -> dict[str, Any]:
    """``--payload``: a JSON object, else ConfigError (prefixed by ``where``)."""
    try:
        value = load_json(text)
    except ValueError as exc:
        raise ConfigError(f"{where}the payload is not valid JSON ({exc}).") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}the payload must be a JSON object.")
    return value


def check_priority(priority: int, where: str = "") -> None:
    """ConfigError unless ``priority`` fits the store's column."""
    if not _PRIORITY_MIN <= priority <= _PRIORITY_MAX:
        raise ConfigError(f"{where}the priority must be from {_PRIORITY_MIN} to {_PRIORITY_MAX}.")


def read_batch(path: str) -> tuple[dict[str, list[EnqueueItem]], dict[str, list[int]]]:
    """The notifications of the JSON-lines file at ``path`` (``-`` for stdin), by tenant, and
    the line number of each. Every line is checked before this returns, so a file is queued
    whole or not at all."""
    by_tenant: dict[str, list[EnqueueItem]] = {}
    by_line: dict[str, list[int]] = {}
    for number, line in enumerate(read_lines(path), 1):
        if line.strip():
            tenant, item = _parse_line(number, line)
            by_tenant.setdefault(tenant, []).append(item)
            by_line.setdefault(tenant, []).append(number)
    return by_tenant, by_line


def read_lines(path: str) -> Iterable[str]:
    """The lines of the UTF-8 file at ``path`` (``-``: stdin); ConfigError when unreadable."""
    if path == "-":
        return sys.stdin.read().splitlines()
    return read_text_lines(path)


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_line(number: int, line: str) -> tuple[str, EnqueueItem]:
    """One line: its tenant and its item; ConfigError naming the line when it is not good."""
    where = f"line {number}: "
    try:
        obj = load_json(line)
    except ValueError as exc:
        raise ConfigError(f"{where}not valid JSON ({exc}).") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}expected a JSON object.")
    for field in ("tenant", "provider", "recipient"):
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ConfigError(f"{where}{field!r} must be a non-empty string.")
    payload = obj.get("payload", {})
    if not isinstance(payload, dict):
        raise ConfigError(f"{where}'payload' must be a JSON object.")
    key = _key(obj.get("key"), where)
    # A JSON escape such as "\udcff" has no UTF-8 form; found here, not after other lines
    # of the file were written.
    if not _is_text(obj["recipient"]) or not _is_text(key or ""):
        raise ConfigError(f"{where}'recipient' and 'key' must be valid Unicode text.")
    priority = obj.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigError(f"{where}'priority' must be a whole number.")
    check_priority(priority, where)
    # A line without a key gets one from its content, so running a file twice adds nothing.
    key = key or "file-" + hashlib.sha256(line.strip().encode()).hexdigest()[:32]
    send_at, expires_at = (_time(obj.get(name), name, where) for name in ("send_at", "expires_at"))
    ttl_s = obj.get("ttl_s")
    if ttl_s is not None and (not isinstance(ttl_s, int | float) or isinstance(ttl_s, bool)):
        raise ConfigError(f"{where}'ttl_s' must be a number of seconds.")
    item = EnqueueItem(
        obj["provider"], obj["recipient"], payload, key, priority, send_at, expires_at, ttl_s
    )
    return obj["tenant"], item


def _time(value: object, name: str, where: str) -> float | None:
    """A line's ``send_at`` or ``expires_at``: RFC 3339 text with an offset, as unix s."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}{name!r} must be a time written as RFC 3339 text.")
    try:
        return parse_time(value, name)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc.message}") from None


def _key(key: object, where: str) -> str | None:
    if key is None or (isinstance(key, str) and 0 < len(key) <= _KEY_MAX):
        return key
    raise ConfigError(f"{where}'key' must be a string of 1 to {_KEY_MAX} characters.")
