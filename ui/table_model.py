"""``ShownModel``: a ``RecordModel`` that filters and sorts itself, for tables of 10,000 rows.

A ``QSortFilterProxyModel`` asks the source model for every row's data through Python, twice
per comparison: sorting 10,000 rows that way took most of a second. Here a sort is one
``sorted`` over the records by the column's sort key, and a filter one pass over each
record's ``filter_text``; both keep the selection (persistent indexes are moved). Live values
come in with ``update_rows`` for a few records at a time (one ``dataChanged`` per record
shown); rows keep their places until the next sort, so a table being read does not jump.
``set_rows`` with the same records in the same order updates them in place; any other list
resets the model (the configuration changed).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from PySide6.QtCore import QModelIndex, QObject, Qt

from ui.record_model import Index, RecordModel

__all__ = ["ShownModel"]

R = TypeVar("R")


class ShownModel(RecordModel[R]):
    """Every record (``all_rows``), and those shown (``rows``: matching the filter, in the
    sort order)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._all: list[R] = []
        self._at: dict[Hashable, int] = {}  # key -> index in ``_all``
        self._shown_at: dict[Hashable, int] = {}  # key -> row shown
        self._filter = ""
        self._sort: tuple[int, Qt.SortOrder] | None = None

    # -- what is shown ----------------------------------------------------------------------

    @property
    def all_rows(self) -> list[R]:
        return list(self._all)

    @property
    def filter_text(self) -> str:
        return self._filter

    def text_for_filter(self, row: R) -> str:
        """What the filter box searches in a record: its first column by default."""
        return self.columns[0].text(row) if self.columns else ""

    def row_of(self, key: Hashable) -> int | None:
        """The row showing the record of ``key``, or None when it is filtered out or gone."""
        return self._shown_at.get(key)

    def set_filter(self, text: str) -> None:
        """Show only the records whose ``text_for_filter`` contains ``text`` (case ignored)."""
        text = text.strip().casefold()
        if text != self._filter:
            self._filter = text
            self._relayout()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort the shown rows by ``column``'s sort key (its text when it has none)."""
        if not 0 <= column < len(self.columns):
            return
        self._sort = (column, order)
        self._relayout()

    def _shown(self) -> list[R]:
        rows = self._all
        if self._filter:
            text = self._filter
            rows = [r for r in rows if text in self.text_for_filter(r).casefold()]
        if self._sort is not None:
            column, order = self._sort
            col = self.columns[column]
            key = col.sort or col.text
            rows = sorted(rows, key=key, reverse=order == Qt.SortOrder.DescendingOrder)
        return list(rows)

    def _index_shown(self) -> None:
        self._shown_at = {self.key(r): i for i, r in enumerate(self._rows)}

    def _relayout(self) -> None:
        """Filter and sort again, moving persistent indexes (the selection) with their
        records; an index whose record is filtered out becomes invalid."""
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        keys = [self.key(self._rows[i.row()]) if i.row() < len(self._rows) else None for i in old]
        self._rows = self._shown()
        self._index_shown()
        new = []
        for index, key in zip(old, keys, strict=True):
            row = self._shown_at.get(key) if key is not None else None
            new.append(QModelIndex() if row is None else self.index(row, index.column()))
        self.changePersistentIndexList(old, new)
        self.layoutChanged.emit()

    # -- records in -------------------------------------------------------------------------

    def set_rows(self, rows: Sequence[R]) -> None:
        """Every record: updated in place when the keys are the same, in the same order (a
        ``dataChanged`` per changed record shown), else a reset, filtered and sorted."""
        rows = list(rows)
        keys = [self.key(r) for r in rows]
        if len(keys) == len(self._all) and all(self._at.get(k) == i for i, k in enumerate(keys)):
            self.update_rows(r for r, old in zip(rows, self._all, strict=True) if r != old)
            return
        self.beginResetModel()
        self._all = rows
        self._at = {k: i for i, k in enumerate(keys)}
        self._rows = self._shown()
        self._index_shown()
        self.endResetModel()

    def update_rows(self, records: Iterable[R]) -> None:
        """Replace the records of the same keys (unknown keys are ignored); the rows shown
        stay where they are. Costs a dict look-up and at most one signal per record."""
        last = len(self.columns) - 1
        for record in records:
            key = self.key(record)
            at = self._at.get(key)
            if at is None:
                continue
            self._all[at] = record
            row = self._shown_at.get(key)
            if row is not None and self._rows[row] != record:
                self._rows[row] = record
                self.dataChanged.emit(self.index(row, 0), self.index(row, last))

    def record_of(self, key: Hashable) -> R | None:
        at = self._at.get(key)
        return None if at is None else self._all[at]

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's API
        return 0 if parent.isValid() else len(self._rows)

    def replace_shown(self, row: int, record: R) -> None:
        """Put ``record`` (of the same key) in shown ``row`` and among all records."""
        self._rows[row] = record
        at = self._at.get(self.key(record))
        if at is not None:
            self._all[at] = record
