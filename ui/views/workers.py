"""Workers: this console's engine and every ``omnipost worker`` sharing the store, by heartbeat."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTableView, QVBoxLayout, QWidget

from engine import WorkerRecord
from ui.bridge import Bridge
from ui.models import WorkersModel
from ui.views.table_tools import filter_box, sized_columns

__all__ = ["WorkersView"]


class WorkersView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.model = WorkersModel(bridge.engine.worker_id, self)
        self.filter = filter_box(self.model, "Filter workers by id, host or state")
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)  # sorted in the model: see ui.table_model
        self.table.sortByColumn(1, Qt.SortOrder.AscendingOrder)
        self.table.verticalHeader().hide()
        sized_columns(self.table, self.model)
        note = QLabel(
            "Workers that sent a heartbeat in the last 15 s. This console's own engine is in "
            "bold; start more with `omnipost worker` on any machine that reaches the store."
        )
        note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.filter)
        layout.addWidget(self.table, 1)
        layout.addWidget(note)
        bridge.workers_changed.connect(self.set_workers)

    def set_workers(self, workers: list[WorkerRecord]) -> None:
        self.model.own_id = self.bridge.engine.worker_id
        self.model.set_rows(sorted(workers, key=lambda w: (w.host, w.id)))
