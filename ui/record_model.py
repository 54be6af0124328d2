"""``RecordModel``: a Qt table model over a list of frozen records, one per row, shown through
a list of ``Column``\\ s. ``set_rows`` keeps the view's selection and scroll position when the
same records come back with new values (it emits ``dataChanged``, not a reset). ``SORT_ROLE``
gives raw values for a ``QSortFilterProxyModel``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)

__all__ = ["LEFT", "RIGHT", "SORT_ROLE", "Column", "Index", "RecordModel"]

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
R = TypeVar("R")
Index = QModelIndex | QPersistentModelIndex
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter


@dataclass(frozen=True)  # no slots: ``Column[T](...)`` sets ``__orig_class__``
class Column(Generic[R]):
    title: str
    text: Callable[[R], str]
    sort: Callable[[R], Any] | None = None
    right: bool = False
    tip: str = ""


class RecordModel(QAbstractTableModel, Generic[R]):
    columns: Sequence[Column[R]] = ()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[R] = []

    def key(self, row: R) -> Hashable:
        """What makes a record the same one across updates."""
        return id(row)

    @property
    def rows(self) -> list[R]:
        return list(self._rows)

    def record(self, row: int) -> R:
        return self._rows[row]

    def set_rows(self, rows: Sequence[R]) -> None:
        rows = list(rows)
        if [self.key(r) for r in rows] == [self.key(r) for r in self._rows]:
            if rows != self._rows:
                self._rows = rows
                self.dataChanged.emit(
                    self.index(0, 0), self.index(len(rows) - 1, len(self.columns) - 1)
                )
            return
        self.beginResetModel()
        self._rows = rows
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self.columns)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        column = self.columns[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.title
        if role == Qt.ItemDataRole.ToolTipRole and column.tip:
            return column.tip
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return RIGHT if column.right else LEFT
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        record = self._rows[index.row()]
        column = self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.text(record)
        if role == SORT_ROLE:
            return column.sort(record) if column.sort else column.text(record)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return RIGHT if column.right else LEFT
        return self.role_data(record, index.column(), role)

    def role_data(self, record: R, column: int, role: int) -> Any:
        """Other roles (tooltips, fonts, check states) for subclasses."""
        return None
