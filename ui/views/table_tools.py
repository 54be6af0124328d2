"""Pieces the views share to stay quick at 10,000 tenants: a filter box wired to a
``ShownModel``, the keys of the rows on screen (so a snapshot reads only those), and a combo
box of names that is filled from a string list model and completes by substring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject, QStringListModel, Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QHeaderView,
    QLineEdit,
    QTableView,
    QWidget,
)

from ui.table_model import ShownModel

__all__ = ["NameCombo", "VisibleRows", "filter_box", "settled_box", "sized_columns"]

_SETTLE_MS = 60  # scrolling or typing settles before the rows on screen are read again
_MEASURED_ROWS = 40  # rows whose text sets a column's width


def sized_columns(table: QTableView, model: ShownModel[Any], *, stretch_last: bool = True) -> None:
    """Columns as wide as their header and first rows' text, set when the rows are replaced
    (a reset) and otherwise left alone: ``ResizeToContents`` measured 1,000 rows of every
    column again on every change, tens of milliseconds a sample at 10,000 rows."""
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    header.setResizeContentsPrecision(_MEASURED_ROWS)
    header.setStretchLastSection(stretch_last)  # else the room left stays empty, at the right
    model.modelReset.connect(table.resizeColumnsToContents)


def filter_box(model: ShownModel[Any], placeholder: str) -> QLineEdit:
    """A line edit whose text filters ``model`` (after a short pause in typing)."""
    return settled_box(placeholder, model.set_filter)


def settled_box(placeholder: str, apply: Callable[[str], None]) -> QLineEdit:
    """A line edit whose text goes to ``apply`` after a short pause in typing (or Enter)."""
    box = QLineEdit()
    box.setPlaceholderText(placeholder)
    box.setClearButtonEnabled(True)
    timer = QTimer(box)
    timer.setSingleShot(True)
    timer.setInterval(_SETTLE_MS)
    timer.timeout.connect(lambda: apply(box.text()))
    box.textChanged.connect(lambda _text: timer.start())
    box.returnPressed.connect(lambda: apply(box.text()))
    return box


class VisibleRows(QObject):
    """Calls ``changed`` with the keys of the rows on screen of ``table`` (over ``model``)
    when they change: after a scroll, a resize, a filter, a sort or new rows; ``()`` while
    the table is hidden (``hidden()``)."""

    def __init__(
        self,
        table: QTableView,
        model: ShownModel[Any],
        key: Callable[[object], str],
        changed: Callable[[tuple[str, ...]], None],
    ) -> None:
        super().__init__(table)
        self._table, self._model, self._key, self._changed = table, model, key, changed
        self.keys: tuple[str, ...] = ()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(_SETTLE_MS)
        self._timer.timeout.connect(self.read)
        table.verticalScrollBar().valueChanged.connect(self.soon)
        for signal in (model.layoutChanged, model.modelReset, model.rowsInserted):
            signal.connect(self.soon)

    def soon(self, *_args: object) -> None:
        self._timer.start()

    def read(self) -> None:
        """The keys of the rows on screen now (none when the table is not visible)."""
        keys: tuple[str, ...] = ()
        if self._table.isVisible() and self._model.rowCount():
            viewport = self._table.viewport()
            first = self._table.rowAt(0)
            last = self._table.rowAt(viewport.height() - 1)
            first = max(0, first)
            last = self._model.rowCount() - 1 if last < 0 else last
            keys = tuple(self._key(self._model.record(r)) for r in range(first, last + 1))
        if keys != self.keys:
            self.keys = keys
            self._changed(keys)

    def hidden(self) -> None:
        self._timer.stop()
        if self.keys:
            self.keys = ()
            self._changed(())


class NameCombo(QComboBox):
    """An editable combo box of many names: filled through a ``QStringListModel`` (one call,
    not one item at a time) and completing what is typed by substring."""

    def __init__(self, placeholder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.names = QStringListModel(self)
        self.setModel(self.names)
        completer = QCompleter(self.names, self)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setCompleter(completer)
        line = self.lineEdit()
        if line is not None and placeholder:
            line.setPlaceholderText(placeholder)

    def set_names(self, names: Sequence[str]) -> None:
        """Offer ``names``; the text typed or chosen stays."""
        names = list(names)
        if names == self.names.stringList():
            return
        current = self.currentText()
        self.blockSignals(True)
        self.names.setStringList(names)
        self.setEditText(current)
        self.blockSignals(False)
