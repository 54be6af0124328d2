"""The log panel: deliveries, errors and audit entries, newest first, filtered as you type."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ui.bridge import Bridge
from ui.log_model import LogFilter, LogModel
from ui.state import LogKind

__all__ = ["LogPanel"]


class LogPanel(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = LogModel(parent=self)
        self.proxy = LogFilter(self)
        self.proxy.setSourceModel(self.model)
        self.kinds = {
            LogKind.DELIVERY: QCheckBox("Deliveries"),
            LogKind.ERROR: QCheckBox("Errors"),
            LogKind.AUDIT: QCheckBox("Audit"),
        }
        controls = QHBoxLayout()
        for box in self.kinds.values():
            box.setChecked(True)
            box.toggled.connect(self._kinds_changed)
            controls.addWidget(box)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Filter…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.proxy.setFilterFixedString)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.model.clear)
        controls.addWidget(self.search, 1)
        controls.addWidget(clear)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(20)
        header = self.table.horizontalHeader()
        # Fixed widths: measuring 2,000 rows on every insert would cost more than the insert.
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        metrics = self.table.fontMetrics()
        for column, sample in enumerate(("00:00:00.000", "delivery", "a-tenant-name")):
            self.table.setColumnWidth(column, metrics.horizontalAdvance(sample) + 24)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 4)
        layout.addLayout(controls)
        layout.addWidget(self.table)
        bridge.log_added.connect(self.model.add)

    def _kinds_changed(self) -> None:
        self.proxy.set_kinds(kind for kind, box in self.kinds.items() if box.isChecked())
