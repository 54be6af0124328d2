"""The log panel's model: the newest entries first, at most ``capacity``, filtered by kind."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor

from ui.fmt import fmt_clock
from ui.state import LogEntry, LogKind

__all__ = ["LogFilter", "LogModel"]

Index = QModelIndex | QPersistentModelIndex
KIND_ROLE = Qt.ItemDataRole.UserRole + 2
_ERROR = QColor("#d64545")
_THROTTLED = QColor("#c98a12")


class LogModel(QAbstractTableModel):
    HEADERS = ("Time", "Kind", "Tenant", "Message")

    def __init__(self, capacity: int = 2000, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.capacity = capacity
        self._entries: list[LogEntry] = []  # newest first

    def add(self, entries: Sequence[LogEntry]) -> None:
        """Add entries given oldest first; the oldest beyond ``capacity`` go."""
        if not entries:
            return
        fresh = list(reversed(entries))[: self.capacity]
        self.beginInsertRows(QModelIndex(), 0, len(fresh) - 1)
        self._entries[:0] = fresh
        self.endInsertRows()
        if len(self._entries) > self.capacity:
            self.beginRemoveRows(QModelIndex(), self.capacity, len(self._entries) - 1)
            del self._entries[self.capacity :]
            self.endRemoveRows()

    def clear(self) -> None:
        self.beginResetModel()
        self._entries.clear()
        self.endResetModel()

    def entries(self) -> list[LogEntry]:
        return list(self._entries)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self._entries)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if (
            role == Qt.ItemDataRole.DisplayRole
            and orientation == Qt.Orientation.Horizontal
            and 0 <= section < len(self.HEADERS)
        ):
            return self.HEADERS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._entries):
            return None
        entry = self._entries[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return (fmt_clock(entry.ts), entry.kind.value, entry.tenant, entry.text)[index.column()]
        if role == Qt.ItemDataRole.ToolTipRole and index.column() == 3:
            return entry.text
        if role == Qt.ItemDataRole.ForegroundRole and entry.kind is LogKind.ERROR:
            return QBrush(_ERROR)
        if role == Qt.ItemDataRole.ForegroundRole and ": throttled" in entry.text:
            return QBrush(_THROTTLED)
        if role == KIND_ROLE:
            return entry.kind.value
        return None


class LogFilter(QSortFilterProxyModel):
    """Shows the kinds switched on whose text contains the search text."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._kinds = {kind.value for kind in LogKind}
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(-1)

    def set_kinds(self, kinds: Iterable[LogKind]) -> None:
        self.beginFilterChange()
        self._kinds = {kind.value for kind in kinds}
        self.endFilterChange()

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        model = self.sourceModel()
        kind = model.data(model.index(source_row, 0, source_parent), KIND_ROLE)
        return kind in self._kinds and super().filterAcceptsRow(source_row, source_parent)
