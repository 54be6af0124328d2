"""The log panel's sources: deliveries and audit entries from the store, warnings and errors
from the engine's own log, and the console's error sentences. Entries wait here until the
bridge takes them."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from engine import DeliveryEntry, Engine, Outcome, TenantRecord
from ui.state import LogEntry, LogKind

__all__ = ["LogFeed", "audit_text"]

_WAITING = 2000  # entries kept when nobody takes them
_PER_POLL = 100  # newest audit entries read per poll
_SHOWN_PER_POLL = 200  # newest deliveries of all tenants read per poll: the log is a sample


class _EngineLog(logging.Handler):
    def __init__(self, feed: LogFeed) -> None:
        super().__init__(logging.WARNING)
        self._feed = feed

    def emit(self, record: logging.LogRecord) -> None:
        self._feed.error(record.getMessage(), ts=record.created)


class LogFeed:
    def __init__(self) -> None:
        self._waiting: deque[LogEntry] = deque(maxlen=_WAITING)
        self._handler = _EngineLog(self)
        self._last_audit = 0
        self._last_delivery = 0

    def attach(self) -> None:
        """Listen to the engine's warnings and errors (until ``detach``)."""
        logger = logging.getLogger("engine")
        if self._handler not in logger.handlers:
            logger.addHandler(self._handler)

    def detach(self) -> None:
        logging.getLogger("engine").removeHandler(self._handler)

    def error(self, text: str, *, tenant: str = "", ts: float | None = None) -> None:
        self._waiting.append(LogEntry(ts or time.time(), LogKind.ERROR, tenant, text))

    def take(self) -> list[LogEntry]:
        """Every waiting entry, oldest first."""
        entries = sorted(self._waiting, key=lambda e: e.ts)
        self._waiting.clear()
        return entries

    async def poll(self, engine: Engine, tenants: Sequence[TenantRecord]) -> None:
        """Read audit entries and every tenant's deliveries newer than the last poll: two
        reads, however many tenants there are (the newest ``_SHOWN_PER_POLL`` deliveries of
        all tenants are kept: the log is a sample). ``tenants`` names them."""
        names = {t.id: t.name for t in tenants}
        for entry in reversed(await engine.audit_entries(limit=_PER_POLL)):
            if entry.id > self._last_audit:
                self._last_audit = entry.id
                tenant = names.get(entry.tenant_id, "") if entry.tenant_id else ""
                text = audit_text(entry.actor, entry.action, entry.detail)
                self._waiting.append(LogEntry(entry.ts, LogKind.AUDIT, tenant, text))
        rows = await engine.deliveries_after(self._last_delivery, limit=_SHOWN_PER_POLL)
        if rows:
            self._last_delivery = max(self._last_delivery, rows[0].id)
        fresh = [_delivery(row, names.get(row.tenant_id, str(row.tenant_id))) for row in rows]
        fresh.sort(key=lambda e: e.ts)
        self._waiting.extend(fresh)


def _delivery(row: DeliveryEntry, tenant: str) -> LogEntry:
    outcome = row.outcome
    latency = "" if row.latency_s is None else f" in {row.latency_s * 1000:.0f} ms"
    text = f"#{row.notification_id} attempt {row.attempt}: {outcome.value}{latency}"
    if row.detail and outcome is not Outcome.DELIVERED:
        text += f" ({row.detail})"
    # A 429 is the provider pacing us, not a failure: it is requeued without spending an attempt.
    ok = outcome in (Outcome.DELIVERED, Outcome.THROTTLED)
    kind = LogKind.DELIVERY if ok else LogKind.ERROR
    return LogEntry(row.ts, kind, tenant, text)


def audit_text(actor: str, action: str, detail: Mapping[str, Any]) -> str:
    """``console:ann@host tenant.set acme: rate 50/s, burst 20``."""
    name = detail.get("name") or "/".join(
        str(detail[k]) for k in ("tenant", "provider") if k in detail
    )
    parts = [
        _detail_part(key, value)
        for key, value in detail.items()
        if key not in ("name", "tenant", "provider")
    ]
    head = f"{actor} {action} {name}".rstrip()
    return f"{head}: {', '.join(parts)}" if parts else head


def _detail_part(key: str, value: Any) -> str:
    if key == "limit":
        if value is None:
            return "unlimited"
        if isinstance(value, dict):
            return f"{value.get('rate_per_s', 0):g}/s, burst {value.get('burst', 0):g}"
    if key == "rate_per_s":
        return "unlimited" if value is None else f"rate {value:g}/s"
    if key == "burst" and isinstance(value, int | float):
        return f"burst {value:g}"
    return f"{key} {value if isinstance(value, str) else json.dumps(value)}"
