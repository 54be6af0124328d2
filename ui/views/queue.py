"""Queue and dead letters: filter by tenant and state; retry or discard the selected dead
notifications, or all that match, or cancel the selected queued ones, after a confirmation
that does not block the window.

The tenant box completes among thousands of names (empty: every tenant, read in one query per
state, not one per tenant); the rows read filter and sort in their model."""

from __future__ import annotations

from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine import NotificationState, TenantRecord
from ui.bridge import Bridge
from ui.queue_models import NotificationsModel
from ui.state import QueueRow
from ui.views.table_tools import NameCombo, filter_box, sized_columns
from ui.widgets import MessageBar

__all__ = ["QueueView"]

ALL = "All tenants"  # what an empty tenant box means


class QueueView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.model = NotificationsModel(self)
        self._build()
        bridge.tenants_changed.connect(self.set_tenants)
        bridge.queue_changed.connect(self.set_rows)

    def _build(self) -> None:
        self.tenant = NameCombo(ALL.lower())
        self.tenant.setMinimumContentsLength(18)
        self.state = QComboBox()
        self.state.addItem("dead", NotificationState.DEAD.value)
        for state in (
            NotificationState.QUEUED,
            NotificationState.SCHEDULED,
            NotificationState.LEASED,
        ):
            self.state.addItem(state.value, state.value)
        self.state.addItem("delivered", NotificationState.DELIVERED.value)
        self.state.addItem("cancelled", NotificationState.CANCELLED.value)
        self.state.addItem("suppressed", NotificationState.SUPPRESSED.value)
        self.state.addItem("expired", NotificationState.EXPIRED.value)
        self.state.addItem("any state", "")
        self.tenant.activated.connect(lambda _index: self.reload())
        line = self.tenant.lineEdit()
        if line is not None:
            line.editingFinished.connect(self.reload)
        self.state.currentIndexChanged.connect(self.reload)
        self.rows_filter = filter_box(self.model, "Filter the rows shown")
        self.count = QLabel()
        filters = QHBoxLayout()
        filters.addWidget(QLabel("Tenant"))
        filters.addWidget(self.tenant)
        filters.addWidget(QLabel("State"))
        filters.addWidget(self.state)
        filters.addWidget(self.rows_filter, 1)
        filters.addWidget(self.count)

        self.bar = MessageBar()
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.verticalHeader().hide()
        sized_columns(self.table, self.model)
        self.table.selectionModel().selectionChanged.connect(self._update_buttons)

        layout = QVBoxLayout(self)
        layout.addLayout(filters)
        layout.addWidget(self.bar)
        layout.addWidget(self.table, 1)
        layout.addLayout(self._actions())
        self._update_buttons()

    def _actions(self) -> QHBoxLayout:
        self.retry_selected = QPushButton("Retry selected")
        self.discard_selected = QPushButton("Discard selected…")
        self.retry_all = QPushButton("Retry all matching…")
        self.discard_all = QPushButton("Discard all matching…")
        self.retry_selected.clicked.connect(lambda: self.confirm(retry=True, selected=True))
        self.discard_selected.clicked.connect(lambda: self.confirm(retry=False, selected=True))
        self.retry_all.clicked.connect(lambda: self.confirm(retry=True, selected=False))
        self.discard_all.clicked.connect(lambda: self.confirm(retry=False, selected=False))
        self.cancel_selected = QPushButton("Cancel selected…")
        self.cancel_selected.clicked.connect(self.confirm_cancel)
        actions = QHBoxLayout()
        for button in (self.retry_selected, self.discard_selected, self.retry_all):
            actions.addWidget(button)
        actions.addWidget(self.discard_all)
        actions.addWidget(self.cancel_selected)
        actions.addStretch(1)
        self.hint = QLabel(
            "Only dead notifications can be retried or discarded, and queued or scheduled ones "
            "cancelled."
        )
        actions.addWidget(self.hint)
        return actions

    # -- data ------------------------------------------------------------------------------

    def filters(self) -> tuple[str | None, NotificationState | None]:
        text = self.tenant.currentText().strip()
        tenant = None if text in ("", ALL) else text
        state = self.state.currentData()
        return tenant, NotificationState(state) if state else None

    def reload(self) -> None:
        if self.isVisible():
            self.bridge.load_queue(*self.filters())

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.bridge.load_queue(*self.filters())

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.bridge.stop_queue_updates()

    def set_tenants(self, tenants: list[TenantRecord]) -> None:
        self.tenant.set_names([t.name for t in tenants])

    def set_rows(self, rows: list[QueueRow]) -> None:
        self.model.set_rows(rows)
        tenant, state = self.filters()
        whose = f" of {tenant}" if tenant else ""
        if not rows:
            kind = f"{state.value} " if state else ""
            self.count.setText(f"no {kind}notifications{whose}")
        else:
            self.count.setText(
                f"{len(rows)} read, newest first: at most 200"
                + ("" if tenant else " of all tenants (queued: of the 20 deepest)")
            )
        self._update_buttons()

    def selected_ids(self) -> list[int]:
        rows = [i.row() for i in self.table.selectionModel().selectedRows()]
        return self.model.ids(rows)

    def selected_queued(self) -> list[QueueRow]:
        """The selected rows that are queued or scheduled: those ``Cancel selected`` would
        cancel."""
        found = (self.model.record_of(i) for i in self.selected_ids())
        waiting = (NotificationState.QUEUED, NotificationState.SCHEDULED)
        return [r for r in found if r is not None and r.view.state in waiting]

    def _dead_shown(self) -> bool:
        return self.filters()[1] is NotificationState.DEAD

    def _update_buttons(self) -> None:
        dead = self._dead_shown()
        chosen = bool(self.selected_ids()) and dead
        self.retry_selected.setEnabled(chosen)
        self.discard_selected.setEnabled(chosen)
        self.retry_all.setEnabled(dead and self.model.rowCount() > 0)
        self.discard_all.setEnabled(dead and self.model.rowCount() > 0)
        self.cancel_selected.setEnabled(bool(self.selected_queued()))
        self.hint.setVisible(not dead and not self.cancel_selected.isEnabled())

    # -- actions ---------------------------------------------------------------------------

    def confirm(self, *, retry: bool, selected: bool) -> None:
        """Ask in the message bar; nothing happens until the operator confirms there."""
        tenant, _ = self.filters()
        ids = self.selected_ids() if selected else None
        whose = f" of {tenant}" if tenant else ""
        what = (
            f"{len(ids)} selected dead notification{'s' if len(ids) != 1 else ''}"
            if ids is not None
            else f"every dead notification{whose}"
        )
        if retry and ids is not None:
            self.bridge.dead_retry(ids, tenant)  # harmless and undoable: no question
            return
        verb = "Retry" if retry else "Discard"
        consequence = (
            "They go back to the queue with a fresh attempt budget."
            if retry
            else "They are deleted for good."
        )
        self.bar.ask(
            f"{verb} {what}? {consequence}",
            verb,
            lambda: (self.bridge.dead_retry if retry else self.bridge.dead_discard)(ids, tenant),
            level="info" if retry else "warn",
        )

    def confirm_cancel(self) -> None:
        """Ask in the message bar before cancelling the selected queued or scheduled
        notifications."""
        rows = self.selected_queued()
        if not rows:
            return
        what = f"{len(rows)} selected waiting notification{'s' if len(rows) != 1 else ''}"
        targets = [(r.tenant, r.view.id) for r in rows]
        self.bar.ask(
            f"Cancel {what}? They will never be sent; this cannot be undone.",
            "Cancel them",
            lambda: self.bridge.cancel_notifications(targets),
            level="warn",
        )
        self.bar.reject_button.setText("Keep them")  # "Cancel" beside "Cancel them" would puzzle
