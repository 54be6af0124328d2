"""Providers: the list, a form to add or edit one (secrets never shown once saved), a test send."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import COMMON_OPTIONS, PROVIDER_KINDS, ConfigError, OptionSpec, ProviderRecord
from ui.bridge import Bridge
from ui.models import ProvidersModel, parse_burst, parse_rate_text
from ui.views.tenants import limit_from_fields
from ui.widgets import CheckedEdit

__all__ = ["ProvidersView", "kind_rows"]


def kind_rows(kind: str) -> tuple[list[OptionSpec], list[OptionSpec]]:
    """The options and the secrets ``kind`` declares (engine's ``PROVIDER_KINDS``), offered as
    rows with their hints. Families such as ``header.NAME`` are not (the user names those), nor
    the options every kind takes (``COMMON_OPTIONS``: the table's tooltip lists them)."""
    declared = PROVIDER_KINDS.get(kind)
    specs = [s for s in declared.own_options if not s.prefix] if declared is not None else []
    return [s for s in specs if not s.secret], [s for s in specs if s.secret]


def _hints(kind: str) -> dict[tuple[bool, str], str]:
    """(secret, name) -> hint, for the rows of a saved provider."""
    declared = PROVIDER_KINDS.get(kind)
    specs = declared.options if declared is not None else ()
    return {(s.secret, s.name): s.hint() for s in specs if not s.prefix}


SAVED = "saved — type to replace, leave empty to keep"


class ProvidersView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.model = ProvidersModel(self)
        self._providers: dict[str, ProviderRecord] = {}
        self._build()
        bridge.providers_changed.connect(self.set_providers)
        bridge.sampled.connect(lambda snap: self.model.set_circuits(snap.health))
        bridge.test_sent.connect(self.test_result.setText)

    def _build(self) -> None:
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(self._selected)
        self.new_button = QPushButton("New provider")
        self.new_button.clicked.connect(self.new_provider)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.table, 1)
        left_layout.addWidget(self.new_button)
        left_layout.addWidget(self._test_box())
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self._form())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        QVBoxLayout(self).addWidget(splitter)

    def _form(self) -> QGroupBox:
        box = QGroupBox("Provider")
        self.name = QLineEdit()
        self.kind = QComboBox()
        for index, kind in enumerate(sorted(PROVIDER_KINDS)):
            self.kind.addItem(kind)
            self.kind.setItemData(index, PROVIDER_KINDS[kind].summary, Qt.ItemDataRole.ToolTipRole)
        self.kind.currentTextChanged.connect(self._kind_changed)
        self.rate = CheckedEdit(parse_rate_text, "empty: unlimited")
        self.burst = CheckedEdit(
            lambda t: parse_burst(t) if t.strip() else None, "default: 1 s worth"
        )
        self.options = _pairs_table(("Option", "Value"))
        common = "\n".join(f"{s.name}: {s.hint()}" for s in COMMON_OPTIONS)
        self.options.setToolTip(f"Every kind also takes (add a row):\n{common}")
        self.secrets = _pairs_table(("Secret", "Value"))
        self.secrets.setToolTip("Secrets are stored encrypted and never shown again once saved.")
        add_option = QPushButton("Add option")
        add_option.clicked.connect(lambda: _add_row(self.options, "", ""))
        add_secret = QPushButton("Add secret")
        add_secret.clicked.connect(lambda: self._add_secret("", saved=False))
        self.save_button = QPushButton("Save provider")
        self.save_button.setDefault(True)
        self.save_button.clicked.connect(self.save)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        limit = QHBoxLayout()
        limit.addWidget(self.rate)
        limit.addWidget(self.burst)
        form.addRow("Rate, burst", limit)
        layout = QVBoxLayout(box)
        layout.addLayout(form)
        layout.addWidget(self.options, 2)
        layout.addWidget(add_option)
        layout.addWidget(self.secrets, 1)
        layout.addWidget(add_secret)
        layout.addWidget(self.save_button)
        self.new_provider()
        return box

    def _test_box(self) -> QGroupBox:
        box = QGroupBox("Test send (outside the queue and the limits)")
        self.test_recipient = QLineEdit()
        self.test_recipient.setPlaceholderText("recipient: an address, number or token")
        self.test_button = QPushButton("Send test")
        self.test_button.clicked.connect(self.send_test)
        self.test_result = QLabel("Select a provider, then send one test message through it.")
        self.test_result.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.test_recipient, 1)
        row.addWidget(self.test_button)
        layout = QVBoxLayout(box)
        layout.addLayout(row)
        layout.addWidget(self.test_result)
        return box

    # -- data ------------------------------------------------------------------------------

    def set_providers(self, providers: list[ProviderRecord]) -> None:
        selected = self.selected()
        self._providers = {p.name: p for p in providers}
        self.model.set_rows(sorted(providers, key=lambda p: p.name))
        if selected is not None and selected in self._providers:
            self.show_provider(self._providers[selected])

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return self.model.record(rows[0].row()).name if rows else None

    def _selected(self) -> None:
        name = self.selected()
        if name is not None:
            self.show_provider(self._providers[name])

    def new_provider(self) -> None:
        self.table.clearSelection()
        self.name.clear()
        self.name.setReadOnly(False)
        self.rate.clear()
        self.burst.clear()
        self.kind.setCurrentText("simulated")
        self._kind_changed("simulated", force=True)

    def show_provider(self, provider: ProviderRecord) -> None:
        """Fill the form with ``provider``; its secrets show only as saved."""
        self.name.setText(provider.name)
        self.name.setReadOnly(True)
        self.kind.blockSignals(True)
        self.kind.setCurrentText(provider.kind)
        self.kind.blockSignals(False)
        limit = provider.limit
        self.rate.setText("" if limit is None else f"{limit.rate_per_s:g}")
        self.burst.setText("" if limit is None else f"{limit.burst:g}")
        known_options, known_secrets = kind_rows(provider.kind)
        hints = _hints(provider.kind)
        self.options.setRowCount(0)
        for key, value in sorted(provider.options.items()):
            _add_row(self.options, key, value, hints.get((False, key), ""))
        for spec in known_options:  # offered empty: what else this kind understands
            if spec.name not in provider.options:
                _add_row(self.options, spec.name, "", spec.hint())
        self.secrets.setRowCount(0)
        for key in provider.secret_names:
            self._add_secret(key, saved=True, hint=hints.get((True, key), ""))
        for spec in known_secrets:
            if spec.name not in provider.secret_names:
                self._add_secret(spec.name, saved=False, hint=spec.hint())

    def _kind_changed(self, kind: str, force: bool = False) -> None:
        if self.name.isReadOnly() and not force:
            return  # editing a saved provider: keep its rows
        options, secrets = kind_rows(kind)
        self.options.setRowCount(0)
        for spec in options:
            _add_row(self.options, spec.name, "", spec.hint())
        self.secrets.setRowCount(0)
        for spec in secrets:
            self._add_secret(spec.name, saved=False, hint=spec.hint())

    def _add_secret(self, key: str, *, saved: bool, hint: str = "") -> None:
        row = self.secrets.rowCount()
        self.secrets.insertRow(row)
        item = QTableWidgetItem(key)
        item.setToolTip(hint)
        self.secrets.setItem(row, 0, item)
        edit = QLineEdit()
        edit.setEchoMode(QLineEdit.EchoMode.Password)
        edit.setPlaceholderText(SAVED if saved else "value")
        edit.setToolTip(hint)
        self.secrets.setCellWidget(row, 1, edit)

    # -- actions ---------------------------------------------------------------------------

    def form_values(self) -> tuple[str, str, object, dict[str, str], dict[str, str]]:
        """(name, kind, limit, options, secrets) from the form; secrets left empty are not
        included (kept as saved). Raises ``ConfigError``."""
        name = self.name.text().strip()
        if not name:
            raise ConfigError("give the provider a name.")
        limit = limit_from_fields(self.rate.text(), self.burst.text())
        options = {k: v for k, v in _rows(self.options) if k and v}
        secrets = {}
        for row in range(self.secrets.rowCount()):
            item = self.secrets.item(row, 0)
            edit = self.secrets.cellWidget(row, 1)
            key = item.text().strip() if item is not None else ""
            if key and isinstance(edit, QLineEdit) and edit.text():
                secrets[key] = edit.text()
        return name, self.kind.currentText(), limit, options, secrets

    def save(self) -> None:
        try:
            name, kind, limit, options, secrets = self.form_values()
        except ConfigError as exc:
            self.bridge.report_error(exc.message)
            return
        self.bridge.save_provider(name, kind, limit, options, secrets)  # type: ignore[arg-type]
        for row in range(self.secrets.rowCount()):  # typed secrets leave the form at once
            edit = self.secrets.cellWidget(row, 1)
            if isinstance(edit, QLineEdit) and edit.text():
                edit.clear()
                edit.setPlaceholderText(SAVED)
        self.name.setReadOnly(True)

    def send_test(self) -> None:
        provider = self.selected() or (self.name.text().strip() if self.name.isReadOnly() else "")
        recipient = self.test_recipient.text().strip()
        if not provider or not recipient:
            self.test_result.setText("Select a provider and give a recipient first.")
            return
        self.test_result.setText(f"Sending a test through {provider}…")
        self.bridge.provider_test_send(provider, recipient)


def _pairs_table(headers: tuple[str, str]) -> QTableWidget:
    table = QTableWidget(0, 2)
    table.setHorizontalHeaderLabels(list(headers))
    table.verticalHeader().hide()
    table.horizontalHeader().setStretchLastSection(True)
    table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
    return table


def _add_row(table: QTableWidget, key: str, value: str, hint: str = "") -> None:
    """A row of ``key`` and ``value``; ``hint`` (type, default, help) shows on hovering."""
    row = table.rowCount()
    table.insertRow(row)
    for column, text in enumerate((key, value)):
        item = QTableWidgetItem(text)
        item.setToolTip(hint)
        table.setItem(row, column, item)


def _rows(table: QTableWidget) -> list[tuple[str, str]]:
    rows = []
    for row in range(table.rowCount()):
        key, value = table.item(row, 0), table.item(row, 1)
        rows.append(
            (
                key.text().strip() if key is not None else "",
                value.text().strip() if value is not None else "",
            )
        )
    return rows
