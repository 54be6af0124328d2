"""Qt table models over the engine's read models, each a ``RecordModel`` (ui/record_model.py).
Display formatting lives here, not in views.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import (
    QObject,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QFont

from engine import (
    MASKED_VALUE,  # the CLI's mask too
    BucketKey,
    BucketLevel,
    Circuit,
    CircuitState,
    ConfigError,
    Limit,
    ProviderRecord,
    TenantDepth,
    TenantRecord,
    WorkerRecord,
    parse_rate,
)
from ui.fmt import fmt_age, fmt_count, fmt_duration, fmt_limit, fmt_rate
from ui.record_model import LEFT, RIGHT, SORT_ROLE, Column, Index, RecordModel
from ui.table_model import ShownModel

__all__ = [
    "SORT_ROLE",
    "Column",
    "ProvidersModel",
    "RecordModel",
    "ShownModel",
    "TenantsModel",
    "WorkersModel",
    "parse_burst",
    "parse_rate_text",
]

_RIGHT, _LEFT = RIGHT, LEFT


# -- tenants ---------------------------------------------------------------------------------


def parse_rate_text(text: str) -> float | None:
    """A rate as typed: empty or ``unlimited`` means no limit (None); else ``parse_rate``.
    Raises ``ConfigError`` with one sentence."""
    text = text.strip()
    if text == "" or text.lower() in ("unlimited", "none", "-"):
        return None
    return parse_rate(text)


def parse_burst(text: str) -> float:
    """A burst as typed: a number of at least 1. Raises ``ConfigError`` with one sentence."""
    try:
        burst = float(text.strip())
    except ValueError:
        raise ConfigError(f"cannot read {text[:40]!r} as a burst; write a number.") from None
    if not burst >= 1 or burst == float("inf"):
        raise ConfigError("the burst must be a number of at least 1.")
    return burst


@dataclass(frozen=True, slots=True)
class TenantRow:
    record: TenantRecord
    tokens: float | None = None
    queued: int = 0
    leased: int = 0
    oldest_s: float | None = None
    pending: Limit | bool | None = False  # False: no edit waiting; else the limit asked for


class TenantsModel(ShownModel[TenantRow]):
    """Tenants with live tokens and depth, filtered by name and sorted in the model. Rate,
    burst and enabled are editable: an edit is shown in italics and sent through
    ``limit_edited`` / ``enabled_edited``; the next ``set_tenants`` shows what the store
    holds. Live values arrive for the tenants a snapshot covered (``set_live``'s ``names``:
    the rows on screen); the others keep the values they last had."""

    limit_edited = Signal(str, object)  # tenant, Limit | None
    enabled_edited = Signal(str, bool)

    RATE, BURST, ENABLED = 1, 2, 3
    columns = (
        Column[TenantRow]("Tenant", lambda r: r.record.name, lambda r: r.record.name),
        Column[TenantRow](
            "Rate",
            lambda r: _rate_text(_limit(r)),
            lambda r: _sort_limit(_limit(r))[0],
            right=True,
            tip="Sends per second: 5, 5/s, 300/min or 1000/h. Empty means unlimited.",
        ),
        Column[TenantRow](
            "Burst",
            lambda r: _burst_text(_limit(r)),
            lambda r: _sort_limit(_limit(r))[1],
            right=True,
            tip="Tokens that may be saved up and spent at once (at least 1).",
        ),
        Column[TenantRow]("Enabled", lambda r: "", lambda r: r.record.enabled),
        Column[TenantRow](
            "Tokens",
            lambda r: "—" if r.tokens is None else f"{r.tokens:.1f}",
            lambda r: -1 if r.tokens is None else r.tokens,
            right=True,
            tip="Tokens in the tenant's bucket now.",
        ),
        Column[TenantRow]("Queued", lambda r: fmt_count(r.queued), lambda r: r.queued, right=True),
        Column[TenantRow](
            "In flight", lambda r: fmt_count(r.leased), lambda r: r.leased, right=True
        ),
        Column[TenantRow](
            "Oldest queued",
            lambda r: fmt_duration(r.oldest_s),
            lambda r: r.oldest_s or 0.0,
            right=True,
        ),
    )

    def key(self, row: TenantRow) -> Hashable:
        return row.record.name

    def set_tenants(self, tenants: Sequence[TenantRecord]) -> None:
        rows = []
        for t in sorted(tenants, key=lambda t: t.name):
            old = self.record_of(t.name)
            rows.append(TenantRow(t, *_live(old)) if old is not None else TenantRow(t))
        self.set_rows(rows)

    def set_live(
        self,
        levels: Sequence[BucketLevel],
        depth: Sequence[TenantDepth],
        names: Iterable[str] | None = None,
    ) -> None:
        """Tokens from ``levels`` and queues from ``depth`` for the tenants ``names`` (every
        tenant when None); a named tenant missing from ``depth`` has nothing queued."""
        tokens = {lv.key.tenant: lv.tokens for lv in levels if lv.key == _tenant_key(lv)}
        depths = {d.tenant: d for d in depth}
        wanted = (r.record.name for r in self._all) if names is None else names
        rows = []
        for name in wanted:
            row = self.record_of(name)
            if row is None:
                continue
            d = depths.get(name)
            rows.append(
                TenantRow(
                    row.record,
                    tokens.get(name),
                    d.queued if d else 0,
                    d.leased if d else 0,
                    d.oldest_queued_age_s if d else None,
                    row.pending,
                )
            )
        self.update_rows(rows)

    def flags(self, index: Index) -> Qt.ItemFlag:
        flags = super().flags(index)
        if index.column() in (self.RATE, self.BURST):
            flags |= Qt.ItemFlag.ItemIsEditable
        elif index.column() == self.ENABLED:
            flags |= Qt.ItemFlag.ItemIsUserCheckable
        return flags

    def role_data(self, record: TenantRow, column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.CheckStateRole and column == self.ENABLED:
            return Qt.CheckState.Checked if record.record.enabled else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.EditRole and column == self.RATE:
            limit = _limit(record)
            return "" if limit is None else f"{limit.rate_per_s:g}"
        if role == Qt.ItemDataRole.EditRole and column == self.BURST:
            limit = _limit(record)
            return "" if limit is None else f"{limit.burst:g}"
        if role == Qt.ItemDataRole.FontRole and record.pending is not False:
            font = QFont()
            font.setItalic(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole and record.pending is not False:
            return "Saving…"
        return None

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid():
            return False
        row = self._rows[index.row()]
        name = row.record.name
        if index.column() == self.ENABLED and role == Qt.ItemDataRole.CheckStateRole:
            enabled = Qt.CheckState(value) == Qt.CheckState.Checked
            self.enabled_edited.emit(name, enabled)
            return True
        if role != Qt.ItemDataRole.EditRole or index.column() not in (self.RATE, self.BURST):
            return False
        try:
            limit = self._limit_from(row, index.column(), str(value))
        except ConfigError:
            return False
        if limit == _limit(row):
            return False
        self.replace_shown(index.row(), dataclasses.replace(row, pending=limit))
        self.dataChanged.emit(self.index(index.row(), 0), self.index(index.row(), 7))
        self.limit_edited.emit(name, limit)
        return True

    def _limit_from(self, row: TenantRow, column: int, text: str) -> Limit | None:
        current = _limit(row)
        if column == self.RATE:
            rate = parse_rate_text(text)
            if rate is None:
                return None
            return Limit(rate, current.burst if current else max(1.0, rate))
        if current is None:
            raise ConfigError("set a rate first: an unlimited tenant has no burst.")
        return Limit(current.rate_per_s, parse_burst(text))


def _limit(row: TenantRow) -> Limit | None:
    if row.pending is False or row.pending is True:
        return row.record.limit
    return row.pending


def _rate_text(limit: Limit | None) -> str:
    return "unlimited" if limit is None else fmt_rate(limit.rate_per_s)


def _burst_text(limit: Limit | None) -> str:
    return "—" if limit is None else f"{limit.burst:g}"


def _sort_limit(limit: Limit | None) -> tuple[float, float]:
    return (float("inf"), float("inf")) if limit is None else (limit.rate_per_s, limit.burst)


def _tenant_key(level: BucketLevel) -> BucketKey:
    return BucketKey.for_tenant(level.key.tenant)


def _live(row: TenantRow) -> tuple[float | None, int, int, float | None]:
    return (row.tokens, row.queued, row.leased, row.oldest_s)


# -- providers, workers, depth ---------------------------------------------------------------


def _options_text(p: ProviderRecord) -> str:
    return "  ".join(f"{k}={v}" for k, v in sorted(p.options.items()))


def circuit_text(health: Circuit | None, now: float) -> str:
    """A provider's circuit in a few words: ``closed``, ``open, probe in 12.0 s``, ``half-open``."""
    if health is None or health.state == CircuitState.CLOSED:
        return "closed"
    if health.state == CircuitState.HALF_OPEN:
        return "half-open (probing)"
    wait = None if health.next_probe_at is None else health.next_probe_at - now
    return "open, probe due" if wait is None or wait < 1 else f"open, probe in {fmt_duration(wait)}"


class ProvidersModel(RecordModel[ProviderRecord]):
    """Providers with their circuit's health; secret values are never here, only their names
    shown masked."""

    CIRCUIT = 3

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.health: dict[str, Circuit] = {}
        self.columns = (
            Column[ProviderRecord]("Provider", lambda p: p.name),
            Column[ProviderRecord]("Kind", lambda p: p.kind),
            Column[ProviderRecord]("Limit", lambda p: fmt_limit(p.limit)),
            Column[ProviderRecord](
                "Circuit",
                lambda p: circuit_text(self.health.get(p.name), time.time()),
                tip="Its circuit: closed (sending), open (paused after provider failures), "
                "half-open (one probe send under way).",
            ),
            Column[ProviderRecord]("Options", _options_text),
            Column[ProviderRecord](
                "Secrets", lambda p: "  ".join(f"{k}={MASKED_VALUE}" for k in p.secret_names)
            ),
        )

    def key(self, row: ProviderRecord) -> Hashable:
        return row.name

    def set_circuits(self, health: Sequence[Circuit]) -> None:
        """The latest snapshot's health; repainted while any circuit is not closed (the
        countdown to its probe moves)."""
        fresh = {h.provider: h for h in health}
        paused = any(h.state != CircuitState.CLOSED for h in health)
        if (fresh != self.health or paused) and self.rowCount():
            self.health = fresh
            column = self.CIRCUIT
            self.dataChanged.emit(self.index(0, column), self.index(self.rowCount() - 1, column))
        self.health = fresh

    def role_data(self, record: ProviderRecord, column: int, role: int) -> Any:
        health = self.health.get(record.name)
        if column != self.CIRCUIT or health is None or health.state == CircuitState.CLOSED:
            return None
        if role == Qt.ItemDataRole.ForegroundRole:
            return QColor("#d64545")
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{health.failures} failures in a row; last error: {health.last_error}"
        return None


class WorkersModel(ShownModel[WorkerRecord]):
    """Live workers (this console's engine and ``omnipost worker`` processes) by heartbeat;
    the filter searches id, host and state."""

    columns = (
        Column[WorkerRecord]("Worker", lambda w: w.id),
        Column[WorkerRecord]("Host", lambda w: w.host),
        Column[WorkerRecord]("PID", lambda w: str(w.pid), lambda w: w.pid, right=True),
        Column[WorkerRecord]("State", lambda w: w.state),
        Column[WorkerRecord](
            "Concurrency", lambda w: str(w.concurrency), lambda w: w.concurrency, right=True
        ),
        Column[WorkerRecord](
            "Delivered", lambda w: fmt_count(w.delivered), lambda w: w.delivered, right=True
        ),
        Column[WorkerRecord](
            "Heartbeat", lambda w: fmt_age(w.heartbeat_at), lambda w: -w.heartbeat_at, right=True
        ),
        Column[WorkerRecord](
            "Up for",
            lambda w: fmt_duration(max(0.0, time.time() - w.started_at)),
            lambda w: w.started_at,
            right=True,
        ),
    )

    def __init__(self, own_id: str = "", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.own_id = own_id

    def key(self, row: WorkerRecord) -> Hashable:
        return row.id

    def text_for_filter(self, row: WorkerRecord) -> str:
        return f"{row.id} {row.host} {row.state}"

    def role_data(self, record: WorkerRecord, column: int, role: int) -> Any:
        if record.id != self.own_id:
            return None
        if role == Qt.ItemDataRole.FontRole:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return "This console's own engine."
        return None
