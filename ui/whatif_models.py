"""The what-if mode's Qt models: the limits in force beside the proposed ones (editable), and
each tenant's figures now and as proposed. What they show is decided in ``ui.whatif``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont

from ui.fmt import fmt_limit
from ui.record_model import Column, Index, RecordModel
from ui.whatif import Cell, Comparison, WhatIf

__all__ = ["ComparisonModel", "ProposalsModel"]

_PROBLEM = QColor(214, 69, 69, 70)
_TRENDS = {-1: QColor("#3a9d5d"), 1: QColor("#d64545")}
_PROPOSED_TIP = (
    "A rate (50, 50/s, 300/min) and a burst (a number of at least 1). Empty leaves it as it "
    "is; a rate of 'none' removes the limit."
)


class ProposalsModel(QAbstractTableModel):
    """The limits in force beside the ones proposed, over a ``WhatIf``. Proposed cells take
    any text; one that cannot be read is shaded, with the reason in its tooltip."""

    LABEL, CURRENT, RATE, BURST = range(4)
    HEADERS = ("Limit", "Current", "Proposed rate", "Proposed burst")
    edited = Signal()

    def __init__(self, state: WhatIf, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._keys = [row.key for row in state.rows]
        self._problems = state.problems()

    def refresh(self) -> None:
        """Show the state again: the same rows with new values, or new rows."""
        keys = [row.key for row in self.state.rows]
        self._problems = self.state.problems()
        if keys != self._keys:
            self.beginResetModel()
            self._keys = keys
            self.endResetModel()
        elif keys:
            self.dataChanged.emit(self.index(0, 0), self.index(len(keys) - 1, self.BURST))

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self._keys)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.HEADERS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole and section >= self.RATE:
            return _PROPOSED_TIP
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        found = super().flags(index)
        return found | Qt.ItemFlag.ItemIsEditable if index.column() >= self.RATE else found

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self.state.rows):
            return None
        row = self.state.rows[index.row()]
        column = index.column()
        problem = self._problems.get(row.key) if column >= self.RATE else None
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            if column == self.LABEL:
                return row.label
            if column == self.CURRENT:
                return fmt_limit(row.current)
            proposal = self.state.proposals.get(row.key)
            if proposal is None:
                return ""
            return proposal.rate if column == self.RATE else proposal.burst
        if role == Qt.ItemDataRole.ToolTipRole and column >= self.RATE:
            return problem or _PROPOSED_TIP
        if role == Qt.ItemDataRole.BackgroundRole and problem:
            return _PROBLEM
        if role == Qt.ItemDataRole.FontRole and column >= self.RATE:
            font = QFont()
            font.setBold(True)
            return font
        return None

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or index.column() < self.RATE:
            return False
        key = self.state.rows[index.row()].key
        text = str(value)
        if index.column() == self.RATE:
            self.state.propose(key, rate=text)
        else:
            self.state.propose(key, burst=text)
        self._problems = self.state.problems()
        self.dataChanged.emit(self.index(index.row(), self.RATE), self.index(index.row(), 3))
        self.edited.emit()
        return True


def _cell_column(title: str, cell: Callable[[Comparison], Cell], tip: str) -> Column[Comparison]:
    return Column[Comparison](title, lambda c: str(cell(c)), right=True, tip=tip)


class ComparisonModel(RecordModel[Comparison]):
    """Each tenant's figures now → as proposed; green where the proposal makes one lower,
    red where higher."""

    cells: tuple[Callable[[Comparison], Cell], ...] = (
        lambda c: c.drain,
        lambda c: c.wait_p95,
        lambda c: c.most_queued,
        lambda c: c.paced_by,
    )
    columns = (
        Column[Comparison]("Tenant", lambda c: c.tenant),
        _cell_column("Drain", lambda c: c.drain, "When its last notification was sent."),
        _cell_column("Wait p95", lambda c: c.wait_p95, "Enqueue to delivery, 95th percentile."),
        _cell_column("Most queued", lambda c: c.most_queued, "Its deepest queue."),
        Column[Comparison]("Paced by", lambda c: str(c.paced_by), tip="What held it back most."),
    )

    def key(self, row: Comparison) -> str:
        return row.tenant

    def role_data(self, record: Comparison, column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.ForegroundRole and column > 0:
            return _TRENDS.get(self.cells[column - 1](record).trend)
        return None
