"""Tenants' API keys: listed (never the keys), made (the key shown this once, with a copy
button), revoked after a second click on the same key; and the tenant's own API limits, its
request limit per key and its queue cap, shown and set. Every change is audited by the
engine."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication, QShowEvent
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

from engine import API_KEY_SCOPES, ApiKeyRecord, ConfigError, TenantRecord
from ui.bridge import Bridge
from ui.fmt import fmt_limit, fmt_when
from ui.views.tenants import limit_from_fields

__all__ = ["ApiKeysView"]

COLUMNS = ("ID", "Prefix", "Tenant", "Name", "Scope", "Created", "Last used", "Revoked")


class ApiKeysView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._keys: list[ApiKeyRecord] = []
        self._confirming: int | None = None  # the key a first click on Revoke picked

        self.tenant = QLineEdit()
        self.tenant.setPlaceholderText("tenant (empty: every tenant's keys)")
        self.tenant.returnPressed.connect(self.reload)
        show = QPushButton("Show")
        show.clicked.connect(self.reload)
        self.table = self._make_table()

        self.name = QLineEdit()
        self.name.setPlaceholderText("what the key is for (shown in listings)")
        self.scopes = {scope: QCheckBox(scope) for scope in API_KEY_SCOPES}
        for name, box in self.scopes.items():
            box.setChecked(name != "webhooks")  # endpoints: only when asked for
        self.create_button = QPushButton("Create key")
        self.create_button.clicked.connect(self._create)
        self.revoke_button = QPushButton("Revoke selected")
        self.revoke_button.clicked.connect(self._revoke)
        self.message = QLabel()
        self.message.setWordWrap(True)

        self.new_key = QLineEdit()
        self.new_key.setReadOnly(True)
        self.key_box = self._make_key_box()

        top = QHBoxLayout()
        top.addWidget(self.tenant, 1)
        top.addWidget(show)
        make = QHBoxLayout()
        make.addWidget(self.name, 1)
        for box in self.scopes.values():
            make.addWidget(box)
        make.addWidget(self.create_button)
        make.addWidget(self.revoke_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addLayout(make)
        layout.addWidget(self.key_box)
        layout.addWidget(self._make_limits_box())
        layout.addWidget(self.message)
        bridge.api_keys_loaded.connect(self.set_keys)
        bridge.api_key_created.connect(self.show_key)
        bridge.api_limits_loaded.connect(self.show_limits)

    def _make_limits_box(self) -> QGroupBox:
        """The tenant's request limit per key and queue cap: what the server uses now (its
        own default where the tenant has none), and fields to set them."""
        self.limits_now = QLabel("Name a tenant above to see its API limits.")
        self.api_rate = QLineEdit()
        self.api_rate.setPlaceholderText("requests per key, as 100/s or 6000/min (empty: default)")
        self.api_burst = QLineEdit()
        self.api_burst.setPlaceholderText("burst (empty: a second's worth)")
        self.max_queued = QLineEdit()
        self.max_queued.setPlaceholderText("most it may hold queued (empty: default)")
        self.apply_limits = QPushButton("Set limits")
        self.apply_limits.clicked.connect(self._set_limits)
        box = QGroupBox("API limits of the tenant")
        column = QVBoxLayout(box)
        column.addWidget(self.limits_now)
        fields = QHBoxLayout()
        fields.addWidget(self.api_rate, 2)
        fields.addWidget(self.api_burst, 1)
        fields.addWidget(self.max_queued, 2)
        fields.addWidget(self.apply_limits)
        column.addLayout(fields)
        return box

    def _make_table(self) -> QTableWidget:
        table = QTableWidget(0, len(COLUMNS))
        table.setHorizontalHeaderLabels(COLUMNS)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.verticalHeader().setVisible(False)
        table.horizontalHeader().setStretchLastSection(True)
        table.itemSelectionChanged.connect(self._reset_confirm)
        return table

    def _make_key_box(self) -> QGroupBox:
        """The new key, read-only, with Copy and Done (which forgets it); hidden until then."""
        copy = QPushButton("Copy")
        copy.clicked.connect(self._copy)
        done = QPushButton("Done")
        done.clicked.connect(self._forget_key)
        box = QGroupBox("New key")
        row = QHBoxLayout(box)
        row.addWidget(self.new_key, 1)
        row.addWidget(copy)
        row.addWidget(done)
        box.hide()
        return box

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.reload()

    def reload(self) -> None:
        tenant = self.tenant.text().strip()
        self.bridge.load_api_keys(tenant)
        if tenant:
            self.bridge.load_api_limits(tenant)
        else:
            self.limits_now.setText("Name a tenant above to see its API limits.")

    def show_limits(self, record: TenantRecord) -> None:
        limit = "the server's default" if record.api_limit is None else fmt_limit(record.api_limit)
        if record.max_queued is None:
            cap = "its queue cap is the server's default"
        else:
            cap = f"it may hold at most {record.max_queued:,} notifications queued"
        self.limits_now.setText(f"{record.name}: each key's request limit is {limit}; {cap}.")

    def _set_limits(self) -> None:
        tenant = self.tenant.text().strip()
        if not tenant:
            self.message.setText("Name the tenant whose limits to set, above.")
            return
        try:
            limit = limit_from_fields(self.api_rate.text(), self.api_burst.text())
            cap = _queue_cap(self.max_queued.text())
        except ConfigError as exc:
            self.message.setText(exc.message)
            return
        self.message.setText("")
        self.bridge.set_api_limits(tenant, limit, cap)

    def set_keys(self, records: list[ApiKeyRecord]) -> None:
        self._keys = list(records)
        self.table.setRowCount(len(self._keys))
        for row, r in enumerate(self._keys):
            cells = (
                str(r.id),
                r.prefix,
                r.tenant,
                r.name or "-",
                ",".join(r.scope),
                fmt_when(r.created_at),
                fmt_when(r.last_used_at),
                "-" if r.revoked_at is None else fmt_when(r.revoked_at),
            )
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        self._reset_confirm()

    def show_key(self, record: ApiKeyRecord, key: str) -> None:
        """The new key, this once: copy it now; nothing can show it again."""
        self.new_key.setText(key)
        self.key_box.setTitle(
            f"Key {record.prefix} for {record.tenant}: shown this once; the store keeps only"
            " its hash"
        )
        self.key_box.show()
        self.message.setText("")

    def _create(self) -> None:
        tenant = self.tenant.text().strip()
        scope = [name for name, box in self.scopes.items() if box.isChecked()]
        if not tenant:
            self.message.setText("Name the tenant to make a key for, above.")
        elif not scope:
            self.message.setText("Tick send, read or both.")
        else:
            self.bridge.api_key_create(tenant, self.name.text().strip(), scope)

    def _revoke(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            self.message.setText("Select the key to revoke.")
            return
        record = self._keys[rows[0].row()]
        if record.revoked_at is not None:
            self.message.setText(f"Key {record.prefix} is already revoked.")
            return
        if self._confirming != record.id:
            self._confirming = record.id
            self.revoke_button.setText(f"Revoke {record.prefix} for good?")
            return
        self._reset_confirm()
        self.bridge.api_key_revoke(record.id, self.tenant.text().strip())

    def _reset_confirm(self) -> None:
        self._confirming = None
        self.revoke_button.setText("Revoke selected")

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.new_key.text())
        self.message.setText("Copied.")

    def _forget_key(self) -> None:
        self.new_key.clear()
        self.key_box.hide()
        self.message.setText("")


def _queue_cap(text: str) -> int | None:
    """A queue cap as typed: empty means the server's default (None); else a whole number of
    at least 1. Raises ``ConfigError`` with one sentence."""
    text = text.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"the queue cap must be a whole number of at least 1, not {text[:40]!r}.")
    return int(text)
