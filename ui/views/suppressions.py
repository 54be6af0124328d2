"""A tenant's suppression list: the recipients nothing is sent to, per provider (masked; the
store keeps them encrypted). Shown newest first, added to (typed, or a file of one recipient a
line), and taken from after a second click. Every change is audited by the engine."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine import ProviderRecord, SuppressionRecord, TenantRecord
from ui.bridge import Bridge
from ui.fmt import fmt_when
from ui.record_model import Column
from ui.suppression_bridge import SHOWN
from ui.table_model import ShownModel
from ui.views.table_tools import NameCombo, sized_columns

__all__ = ["SuppressionsModel", "SuppressionsView"]

EVERY = "every provider"


def _notification(e: SuppressionRecord) -> str:
    return "-" if e.notification_id is None else str(e.notification_id)


class SuppressionsModel(ShownModel[SuppressionRecord]):
    """A tenant's entries, one a row, the recipient masked."""

    columns = (
        Column[SuppressionRecord]("ID", lambda e: str(e.id), lambda e: e.id, right=True),
        Column[SuppressionRecord]("Provider", lambda e: e.provider),
        Column[SuppressionRecord]("Recipient", lambda e: e.recipient_masked),
        Column[SuppressionRecord](
            "Source", lambda e: e.source, tip="provider: its answer said the recipient is gone"
        ),
        Column[SuppressionRecord](
            "Added", lambda e: fmt_when(e.created_at), lambda e: e.created_at
        ),
        Column[SuppressionRecord]("Notification", _notification, right=True),
        Column[SuppressionRecord]("Reason", lambda e: e.reason or "-"),
    )

    def key(self, row: SuppressionRecord) -> int:
        return row.id


class SuppressionsView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.model = SuppressionsModel(self)
        self._shown_for = ""  # the tenant whose entries the table holds
        self._confirming: tuple[int, ...] | None = None  # what a first click on Remove picked

        self.tenant = NameCombo("tenant")
        self.tenant.setMinimumContentsLength(18)
        self.tenant.activated.connect(lambda _index: self.reload())
        line = self.tenant.lineEdit()
        if line is not None:
            line.returnPressed.connect(self.reload)
        self.provider_filter = QComboBox()
        self.provider_filter.addItem(EVERY, "")
        self.provider_filter.activated.connect(lambda _index: self.reload())
        show = QPushButton("Show")
        show.clicked.connect(self.reload)
        self.count = QLabel()
        self.table = self._make_table()

        self.provider = QComboBox()
        self.recipient = QLineEdit()
        self.recipient.setPlaceholderText("recipient (an address, a number, a device token)")
        self.recipient.returnPressed.connect(self._add)
        self.reason = QLineEdit()
        self.reason.setPlaceholderText("why (shown in the list)")
        self.add_button = QPushButton("Suppress")
        self.add_button.clicked.connect(self._add)
        self.import_button = QPushButton("Import list…")
        self.import_button.clicked.connect(self._import)
        self.remove_button = QPushButton("Remove selected")
        self.remove_button.clicked.connect(self._remove)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self._lay_out(show)
        bridge.tenants_changed.connect(self.set_tenants)
        bridge.providers_changed.connect(self.set_providers)
        bridge.suppressions_loaded.connect(self.set_entries)
        bridge.suppressions_changed.connect(self.message.setText)

    def _lay_out(self, show: QPushButton) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Tenant"))
        top.addWidget(self.tenant)
        top.addWidget(QLabel("Provider"))
        top.addWidget(self.provider_filter)
        top.addWidget(show)
        top.addStretch(1)
        top.addWidget(self.count)
        add = QHBoxLayout()
        add.addWidget(self.provider)
        add.addWidget(self.recipient, 2)
        add.addWidget(self.reason, 1)
        add.addWidget(self.add_button)
        add.addWidget(self.import_button)
        add.addWidget(self.remove_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addLayout(add)
        layout.addWidget(self.message)

    def _make_table(self) -> QTableView:
        table = QTableView()
        table.setModel(self.model)
        table.setSortingEnabled(True)
        table.sortByColumn(0, Qt.SortOrder.DescendingOrder)  # newest first, as listed
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        table.verticalHeader().hide()
        sized_columns(table, self.model)
        table.selectionModel().selectionChanged.connect(self._reset_confirm)
        return table

    # -- data ------------------------------------------------------------------------------

    def set_tenants(self, tenants: list[TenantRecord]) -> None:
        self.tenant.set_names([t.name for t in tenants])

    def set_providers(self, providers: list[ProviderRecord]) -> None:
        names = [p.name for p in providers]
        for box, first in ((self.provider_filter, [EVERY]), (self.provider, [])):
            shown = [box.itemText(i) for i in range(box.count())]
            if shown == first + names:
                continue
            current = box.currentText()
            box.clear()
            for name in first + names:
                box.addItem(name, "" if name == EVERY else name)
            box.setCurrentText(current)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.reload()

    def reload(self) -> None:
        tenant = self.tenant.currentText().strip()
        if tenant:
            self.bridge.load_suppressions(tenant, self.provider_filter.currentData() or "")

    def set_entries(self, tenant: str, entries: Sequence[SuppressionRecord]) -> None:
        self._shown_for = tenant
        self.model.set_rows(entries)
        more = f" (the newest {SHOWN})" if len(entries) == SHOWN else ""
        self.count.setText(f"{len(entries)} suppressed for {tenant}{more}")
        self._reset_confirm()

    # -- changes ---------------------------------------------------------------------------

    def _target(self) -> tuple[str, str] | None:
        """The tenant and provider a change is for, or None (said in the message)."""
        tenant = self.tenant.currentText().strip()
        provider = self.provider.currentText()
        if not tenant:
            self.message.setText("Name the tenant whose list to change, above.")
            return None
        if not provider:
            self.message.setText("Add a provider first: a list is per provider.")
            return None
        return tenant, provider

    def _add(self) -> None:
        target = self._target()
        recipient = self.recipient.text().strip()
        if target is None:
            return
        if not recipient:
            self.message.setText("Type the recipient to suppress.")
            return
        self.bridge.suppress(*target, [recipient], self.reason.text().strip(), self._filter())
        self.recipient.clear()
        self.reason.clear()

    def _import(self) -> None:
        target = self._target()
        if target is None:
            return
        path, _ = QFileDialog.getOpenFileName(
            self, "A list of recipients, one a line", "", "Text (*.txt *.csv);;All files (*)"
        )
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> None:
        """Suppress every recipient of ``path`` (one a line, blank lines skipped) for the
        tenant and provider chosen: all of them, or none and one sentence why."""
        target = self._target()
        if target is None:
            return
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            self.message.setText(f"Cannot read {path.name}: {getattr(exc, 'strerror', exc)}.")
            return
        recipients = [line.strip() for line in lines if line.strip()]
        if not recipients:
            self.message.setText(f"{path.name} holds no recipient.")
            return
        reason = self.reason.text().strip() or f"imported from {path.name}"
        self.bridge.suppress(*target, recipients, reason, self._filter())

    def _remove(self) -> None:
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        if not rows:
            self.message.setText("Select the entries to remove.")
            return
        ids = tuple(self.model.record(r).id for r in rows)
        if self._confirming != ids:
            self._confirming = ids
            n = len(ids)
            self.remove_button.setText(f"Send to {'it' if n == 1 else f'these {n}'} again?")
            return
        self._reset_confirm()
        self.bridge.suppression_remove_ids(self._shown_for, list(ids), self._filter())

    def _filter(self) -> str:
        return str(self.provider_filter.currentData() or "")

    def _reset_confirm(self, *_selection: object) -> None:
        self._confirming = None
        self.remove_button.setText("Remove selected")
