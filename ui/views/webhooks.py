"""A tenant's endpoints for status events: each with its health (enabled, or disabled and why;
events waiting, held and given up; the oldest waiting), read again every few seconds while
shown; the selected one's recent events with what each try answered; add (the signing secret
shown this once, with a copy button), test, rotate the secret, disable or enable, replay the last
hour, remove after a second click. Every change is audited by the engine."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QGuiApplication, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import EndpointRecord, EndpointView, EventRow, event_names
from ui.bridge import Bridge
from ui.fmt import fmt_age, fmt_when

__all__ = ["WebhooksView"]

COLUMNS = ("ID", "URL", "Events", "State", "Waiting", "Held", "Given up", "Oldest waiting")
EVENT_COLUMNS = ("Event", "Type", "Notification", "State", "Tries", "Last answer", "At")
REFRESH_MS = 3000
_DISABLED = QColor("#c0392b")


class WebhooksView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._shown: list[EndpointView] = []
        self._tenant = ""
        self._confirming: int | None = None  # the endpoint a first click on Remove picked

        self.tenant = QLineEdit()
        self.tenant.setPlaceholderText("tenant whose endpoints to show")
        self.tenant.returnPressed.connect(self.reload)
        show = QPushButton("Show")
        show.clicked.connect(self.reload)
        self.table = _table(COLUMNS)
        self.table.itemSelectionChanged.connect(self._selected)
        self.events = _table(EVENT_COLUMNS)
        self.events_title = QLabel("Select an endpoint to see its recent events.")

        self.message = QLabel()
        self.message.setWordWrap(True)
        self.new_secret = QLineEdit()
        self.new_secret.setReadOnly(True)
        self.secret_box = self._make_secret_box()

        top = QHBoxLayout()
        top.addWidget(self.tenant, 1)
        top.addWidget(show)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table, 2)
        layout.addLayout(self._make_actions())
        layout.addLayout(self._make_form())
        layout.addWidget(self.secret_box)
        layout.addWidget(self.message)
        layout.addWidget(self.events_title)
        layout.addWidget(self.events, 3)

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._refresh)
        bridge.webhooks_loaded.connect(self.set_endpoints)
        bridge.webhook_events_loaded.connect(self.set_events)
        bridge.webhook_secret.connect(self.show_secret)
        bridge.webhooks_changed.connect(self.message.setText)

    def _make_form(self) -> QHBoxLayout:
        """URL, types and whether private addresses are allowed: a new endpoint."""
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://app.example.com/omnipost/events")
        self.types = QLineEdit()
        self.types.setPlaceholderText("event types, comma separated (empty: all)")
        self.allow_private = QCheckBox("Allow private addresses (and http)")
        add = QPushButton("Add endpoint")
        add.clicked.connect(self._add)
        make = QHBoxLayout()
        make.addWidget(self.url, 3)
        make.addWidget(self.types, 2)
        make.addWidget(self.allow_private)
        make.addWidget(add)
        return make

    def _make_actions(self) -> QHBoxLayout:
        """What can be done to the selected endpoint."""
        self.test_button = QPushButton("Test")
        self.test_button.clicked.connect(lambda: self._on_selected(self.bridge.webhook_test))
        rotate = QPushButton("Rotate secret")
        rotate.clicked.connect(lambda: self._on_selected(self.bridge.webhook_secret_rotate))
        self.toggle_button = QPushButton("Disable")
        self.toggle_button.clicked.connect(self._toggle)
        replay = QPushButton("Replay last hour")
        replay.clicked.connect(self._replay)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove)
        actions = QHBoxLayout()
        for button in (self.test_button, rotate, self.toggle_button, replay, self.remove_button):
            actions.addWidget(button)
        actions.addStretch(1)
        return actions

    def _make_secret_box(self) -> QGroupBox:
        copy = QPushButton("Copy")
        copy.clicked.connect(self._copy)
        done = QPushButton("Done")
        done.clicked.connect(self._forget_secret)
        box = QGroupBox("Signing secret")
        row = QHBoxLayout(box)
        row.addWidget(self.new_secret, 1)
        row.addWidget(copy)
        row.addWidget(done)
        box.hide()
        return box

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.timer.start()
        if self.tenant.text().strip():
            self.reload()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.timer.stop()

    def reload(self) -> None:
        tenant = self.tenant.text().strip()
        if not tenant:
            self.message.setText("Name the tenant whose endpoints to show.")
            return
        self.bridge.load_webhooks(tenant)

    def _refresh(self) -> None:
        if self._tenant:
            self.bridge.load_webhooks(self._tenant)
            picked = self._picked()
            if picked is not None:
                self.bridge.load_webhook_events(self._tenant, picked.endpoint.id)

    def set_endpoints(self, tenant: str, views: list[EndpointView]) -> None:
        picked = self._picked()
        keep = picked.endpoint.id if picked is not None else None
        self._tenant, self._shown = tenant, list(views)
        table = self.table
        table.blockSignals(True)
        table.setRowCount(len(views))
        for row, view in enumerate(views):
            e, h = view.endpoint, view.health
            state = "enabled" if e.disabled_at is None else f"disabled: {e.disabled_reason}"
            cells = (
                str(e.id),
                e.url,
                _types(e),
                state,
                f"{h.pending:,}",
                f"{h.held:,}",
                f"{h.failed:,}",
                "-" if h.oldest_pending_at is None else fmt_age(h.oldest_pending_at),
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if e.disabled_at is not None and column == 3:
                    item.setForeground(_DISABLED)
                table.setItem(row, column, item)
            if e.id == keep:
                table.selectRow(row)
        table.blockSignals(False)
        table.resizeColumnsToContents()
        if not views:
            self.message.setText(f"{tenant} has no endpoints; add one below.")
        self._selected()

    def set_events(self, tenant: str, endpoint_id: int, rows: list[EventRow]) -> None:
        picked = self._picked()
        if tenant != self._tenant or picked is None or picked.endpoint.id != endpoint_id:
            return
        self.events_title.setText(f"Recent events of webhook {endpoint_id}, newest first")
        self.events.setRowCount(len(rows))
        for row, r in enumerate(rows):
            answer = r.last_error or ("-" if r.last_status is None else str(r.last_status))
            cells = (
                f"evt_{r.id}",
                r.type,
                "-" if r.notification_id is None else str(r.notification_id),
                r.state,
                str(r.tries),
                answer,
                fmt_when(r.occurred_at),
            )
            for column, text in enumerate(cells):
                self.events.setItem(row, column, QTableWidgetItem(text))
        self.events.resizeColumnsToContents()

    def show_secret(self, endpoint: EndpointRecord, secret: str) -> None:
        self.new_secret.setText(secret)
        self.secret_box.setTitle(
            f"Signing secret of webhook {endpoint.id}: shown this once; verify each event's"
            " webhook-signature with it"
        )
        self.secret_box.show()
        self.message.setText("")

    def _picked(self) -> EndpointView | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self._shown):
            return None
        return self._shown[rows[0].row()]

    def _selected(self) -> None:
        self._confirming = None
        self.remove_button.setText("Remove")
        picked = self._picked()
        enabled = picked is None or picked.endpoint.disabled_at is None
        self.toggle_button.setText("Disable" if enabled else "Enable")
        if picked is None:
            self.events.setRowCount(0)
            self.events_title.setText("Select an endpoint to see its recent events.")
            return
        self.bridge.load_webhook_events(self._tenant, picked.endpoint.id)

    def _on_selected(self, action: object) -> None:
        picked = self._picked()
        if picked is None:
            self.message.setText("Select an endpoint first.")
            return
        action(self._tenant, picked.endpoint.id)  # type: ignore[operator]

    def _add(self) -> None:
        tenant = self.tenant.text().strip()
        if not tenant:
            self.message.setText("Name the tenant to add an endpoint for, above.")
            return
        if not self.url.text().strip():
            self.message.setText("Give the endpoint's URL.")
            return
        types = [t.strip() for t in self.types.text().split(",") if t.strip()] or None
        self.message.setText("")
        self.bridge.webhook_add(
            tenant, self.url.text().strip(), types, self.allow_private.isChecked()
        )

    def _toggle(self) -> None:
        picked = self._picked()
        if picked is None:
            self.message.setText("Select an endpoint first.")
            return
        enable = picked.endpoint.disabled_at is not None
        self.bridge.set_webhook_enabled(self._tenant, picked.endpoint.id, enable)

    def _replay(self) -> None:
        picked = self._picked()
        if picked is None:
            self.message.setText("Select an endpoint first.")
            return
        self.bridge.webhook_events_replay(self._tenant, picked.endpoint.id, 3600.0)

    def _remove(self) -> None:
        picked = self._picked()
        if picked is None:
            self.message.setText("Select the endpoint to remove.")
            return
        if self._confirming != picked.endpoint.id:
            self._confirming = picked.endpoint.id
            self.remove_button.setText(f"Remove webhook {picked.endpoint.id} for good?")
            return
        self._confirming = None
        self.remove_button.setText("Remove")
        self.bridge.webhook_remove(self._tenant, picked.endpoint.id)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.new_secret.text())
        self.message.setText("Copied.")

    def _forget_secret(self) -> None:
        self.new_secret.clear()
        self.secret_box.hide()
        self.message.setText("")


def _types(endpoint: EndpointRecord) -> str:
    names = [n.removeprefix("notification.") for n in event_names(endpoint.events)]
    return "all" if len(names) == 7 else ", ".join(names)


def _table(columns: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setStretchLastSection(True)
    return table
