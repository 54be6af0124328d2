"""Tenants and limits: an editable table applied live, the "N per window" helper, pair limits.

At 100,000 tenants: the table holds one page (``PAGE`` rows), read from the store filtered by
name and sorted by name, rate, burst or enabled (``Engine.tenant_page``; the live columns sort
the page shown); the snapshot reads the live columns of the rows on screen only
(``VisibleRows``); the pair limits listed are those of the tenant typed in the pair form, read
when it is typed."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    QTimer,
)
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine import (
    ConfigError,
    Limit,
    PairLimit,
    ProviderRecord,
    Snapshot,
    TenantPage,
    TenantQuery,
    TenantRecord,
)
from ui.bridge import Bridge
from ui.fmt import fmt_limit, fmt_rate
from ui.models import TenantRow, TenantsModel, parse_burst, parse_rate_text
from ui.state import limit_for_window
from ui.views.table_tools import NameCombo, VisibleRows, settled_box, sized_columns
from ui.widgets import CheckedEdit

__all__ = ["LimitDelegate", "TenantsView", "limit_from_fields"]

WINDOWS = (("second", 1.0), ("minute", 60.0), ("hour", 3600.0), ("day", 86400.0))
PAIRS_LISTED = 50
PAGE = 200  # tenants in the table at once
SORTED_IN_STORE = {0: "name", 1: "rate", 2: "burst", 3: "enabled"}  # column -> TenantQuery.sort


def limit_from_fields(rate_text: str, burst_text: str) -> Limit | None:
    """The limit two form fields ask for: no rate means unlimited; no burst means one
    second's worth (at least 1). Raises ``ConfigError`` with one sentence."""
    rate = parse_rate_text(rate_text)
    if rate is None:
        if burst_text.strip():
            raise ConfigError("a burst needs a rate as well.")
        return None
    burst = parse_burst(burst_text) if burst_text.strip() else max(1.0, rate)
    return Limit(rate, burst)


class LimitDelegate(QStyledItemDelegate):
    """Edits rate and burst cells in a line edit that checks the text as you type and only
    commits text that parses."""

    def createEditor(
        self,
        parent: QWidget,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> QWidget:
        if index.column() == TenantsModel.RATE:
            return CheckedEdit(parse_rate_text, "unlimited", parent)
        return CheckedEdit(parse_burst, "at least 1", parent)

    def setEditorData(self, editor: QWidget, index: QModelIndex | QPersistentModelIndex) -> None:
        if isinstance(editor, QLineEdit):
            editor.setText(str(index.data(Qt.ItemDataRole.EditRole) or ""))
            editor.selectAll()

    def setModelData(
        self,
        editor: QWidget,
        model: QAbstractItemModel,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        if isinstance(editor, QLineEdit) and editor.hasAcceptableInput():
            model.setData(index, editor.text(), Qt.ItemDataRole.EditRole)


class TenantsView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.model = TenantsModel(self)
        self.model.limit_edited.connect(bridge.set_tenant_limit)
        self.model.enabled_edited.connect(bridge.set_tenant_enabled)
        self.query = TenantQuery(limit=PAGE)
        self.total = 0
        self._pairs_timer = QTimer(self)
        self._pairs_timer.setSingleShot(True)
        self._pairs_timer.setInterval(250)
        self._pairs_timer.timeout.connect(self._ask_pairs)
        self._build()
        bridge.tenants_changed.connect(self.set_tenants)
        bridge.providers_changed.connect(self.set_providers)
        bridge.limits_changed.connect(lambda _limits: self._ask_pairs())
        bridge.tenant_page_loaded.connect(self.show_page)
        bridge.pairs_loaded.connect(self.show_pairs)
        bridge.sampled.connect(self.on_sample)

    def _build(self) -> None:
        self.new_name = QLineEdit()
        self.new_name.setPlaceholderText("tenant name")
        self.new_rate = CheckedEdit(parse_rate_text, "rate: 50/s, 300/min… (empty: unlimited)")
        self.new_burst = CheckedEdit(
            lambda t: parse_burst(t) if t.strip() else None, "burst (default: 1 s worth)"
        )
        self.add_button = QPushButton("Add tenant")
        self.add_button.clicked.connect(self.tenant_add)
        self.new_name.returnPressed.connect(self.tenant_add)
        self.import_button = QPushButton("Import…")
        self.import_button.setToolTip(
            "Add the tenants of a JSON-lines file, as `omnipost tenant import` does: all of "
            "them, or none when a line is bad"
        )
        self.import_button.clicked.connect(self.tenant_import)
        self.import_update = QCheckBox("update existing")
        self.import_update.setToolTip("Tenants that exist take the file's limits (--update)")
        add_row = QHBoxLayout()
        for widget in (self.new_name, self.new_rate, self.new_burst, self.add_button):
            add_row.addWidget(widget)
        add_row.addWidget(self.import_button)
        add_row.addWidget(self.import_update)

        self.filter = settled_box("Search tenants by name", self.search)
        self.count = QLabel()
        self.previous = QPushButton("◀ Previous")
        self.previous.clicked.connect(lambda: self.turn(-1))
        self.next = QPushButton("Next ▶")
        self.next.clicked.connect(lambda: self.turn(1))
        self._table()
        hint = QLabel(
            "Double-click a rate or burst to change it; it applies to the running engine at "
            "once and is written to the store and the audit log. An empty rate is unlimited."
        )
        hint.setWordWrap(True)

        layout = QVBoxLayout(self)
        layout.addLayout(add_row)
        shown = QHBoxLayout()
        shown.addWidget(self.filter, 1)
        shown.addWidget(self.previous)
        shown.addWidget(self.count)
        shown.addWidget(self.next)
        layout.addLayout(shown)
        layout.addWidget(self.table, 1)
        layout.addWidget(hint)
        helpers = QHBoxLayout()
        helpers.addWidget(self._window_helper(), 1)
        helpers.addWidget(self._pair_form(), 1)
        layout.addLayout(helpers)

    def _table(self) -> None:
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setItemDelegate(LimitDelegate(self.table))
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.horizontalHeader().sortIndicatorChanged.connect(self._sort_in_store)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.AnyKeyPressed
        )
        self.table.verticalHeader().hide()
        sized_columns(self.table, self.model, stretch_last=False)  # figures stay together
        self.table.selectionModel().selectionChanged.connect(self._selected)
        self.visible = VisibleRows(self.table, self.model, _name, self._show_rows)

    def _window_helper(self) -> QGroupBox:
        box = QGroupBox("N per window → rate and burst")
        self.window_count = QSpinBox()
        self.window_count.setRange(2, 10_000_000)
        self.window_count.setValue(100)
        self.window_unit = QComboBox()
        for label, seconds in WINDOWS:
            self.window_unit.addItem(label, seconds)
        self.window_unit.setCurrentIndex(1)
        self.window_share = QSpinBox()
        self.window_share.setRange(0, 90)
        self.window_share.setValue(10)
        self.window_share.setSuffix(" % up front")
        self.window_result = QLabel()
        self.window_result.setWordWrap(True)
        self.window_apply = QPushButton("Apply to the selected tenant")
        self.window_apply.setEnabled(False)
        self.window_apply.clicked.connect(self.apply_window_limit)
        for signal in (
            self.window_count.valueChanged,
            self.window_unit.currentIndexChanged,
            self.window_share.valueChanged,
        ):
            signal.connect(self._update_window_result)
        row = QHBoxLayout()
        row.addWidget(self.window_count)
        row.addWidget(QLabel("per"))
        row.addWidget(self.window_unit)
        row.addWidget(self.window_share)
        layout = QVBoxLayout(box)
        layout.addLayout(row)
        layout.addWidget(self.window_result)
        layout.addWidget(self.window_apply)
        self._update_window_result()
        return box

    def _pair_form(self) -> QGroupBox:
        box = QGroupBox("Limit of one tenant on one provider")
        self.pair_tenant = NameCombo("tenant")
        self.pair_tenant.editTextChanged.connect(lambda _text: self._pairs_timer.start())
        self.pair_provider = QComboBox()
        self.pair_rate = CheckedEdit(parse_rate_text, "rate (empty: remove the limit)")
        self.pair_burst = CheckedEdit(
            lambda t: parse_burst(t) if t.strip() else None, "burst (default: 1 s worth)"
        )
        self.pair_set = QPushButton("Set")
        self.pair_set.clicked.connect(self.pair_limit_set)
        self.pair_list = QListWidget()
        self.pair_list.setMaximumHeight(90)
        form = QFormLayout()
        pick = QHBoxLayout()
        pick.addWidget(self.pair_tenant)
        pick.addWidget(QLabel("on"))
        pick.addWidget(self.pair_provider)
        form.addRow("Tenant", pick)
        limit = QHBoxLayout()
        limit.addWidget(self.pair_rate)
        limit.addWidget(self.pair_burst)
        limit.addWidget(self.pair_set)
        form.addRow("Limit", limit)
        layout = QVBoxLayout(box)
        layout.addLayout(form)
        layout.addWidget(self.pair_list)
        return box

    # -- data in ---------------------------------------------------------------------------

    def set_tenants(self, tenants: list[TenantRecord]) -> None:
        """The configuration changed: read the page shown again; offer the names typed in
        the pair form."""
        self.bridge.load_tenant_page(self.query)
        first = not self.pair_tenant.names.rowCount()
        self.pair_tenant.set_names([t.name for t in tenants])
        if first and tenants:
            self.pair_tenant.setCurrentIndex(0)

    def set_providers(self, providers: list[ProviderRecord]) -> None:
        _refill(self.pair_provider, [p.name for p in providers])

    # -- pages -----------------------------------------------------------------------------

    def ask(self, query: TenantQuery) -> None:
        """Show the page ``query`` asks for, once the store answers."""
        self.query = query
        self.bridge.load_tenant_page(query)

    def search(self, text: str) -> None:
        """The first page of the tenants whose name contains ``text``."""
        if text.strip() != self.query.match:
            self.ask(replace(self.query, match=text.strip(), offset=0))

    def turn(self, pages: int) -> None:
        """The page ``pages`` after (before, when negative) the one shown."""
        offset = min(max(0, self.query.offset + pages * PAGE), max(0, self.total - 1))
        if offset != self.query.offset:
            self.ask(replace(self.query, offset=offset - offset % PAGE))

    def _sort_in_store(self, column: int, order: Qt.SortOrder) -> None:
        """A click on a configured column sorts every tenant (the store's order, from the
        first page); a live column sorts the page shown (the model does)."""
        sort = SORTED_IN_STORE.get(column)
        descending = order == Qt.SortOrder.DescendingOrder
        if sort is not None and (sort, descending) != (self.query.sort, self.query.descending):
            self.ask(replace(self.query, sort=sort, descending=descending, offset=0))

    def show_page(self, page: TenantPage) -> None:
        if page.query != self.query:  # an answer to a page asked for before this one
            return
        self.total = page.total
        self.model.set_tenants(list(page.tenants))
        self._count()
        self._selected()
        self.visible.soon()

    # -- pair limits -----------------------------------------------------------------------

    def _ask_pairs(self) -> None:
        tenant = self.pair_tenant.currentText().strip()
        if tenant:
            self.bridge.load_pairs(tenant)
        else:
            self.pair_list.clear()

    def show_pairs(self, tenant: str, pairs: list[PairLimit]) -> None:
        """The pair limits of the tenant typed in the pair form, at most ``PAIRS_LISTED``
        and a line saying how many more."""
        if tenant != self.pair_tenant.currentText().strip():
            return
        self.pair_list.clear()
        for pair in pairs[:PAIRS_LISTED]:
            self.pair_list.addItem(f"{pair.tenant} on {pair.provider}: {fmt_limit(pair.limit)}")
        if len(pairs) > PAIRS_LISTED:
            self.pair_list.addItem(f"… and {len(pairs) - PAIRS_LISTED:,} more")

    def on_sample(self, snap: Snapshot) -> None:
        self.model.set_live(snap.buckets, snap.depth, self.visible.keys)

    def _show_rows(self, names: tuple[str, ...]) -> None:
        self.bridge.show_tenants("tenants", names)

    def _count(self) -> None:
        q, shown = self.query, self.model.rowCount()
        first = q.offset + 1 if shown else 0
        which = f"matching “{q.match}”" if q.match else "tenants"
        self.count.setText(f"{first:,} to {q.offset + shown:,} of {self.total:,} {which}")
        self.previous.setEnabled(q.offset > 0)
        self.next.setEnabled(q.offset + shown < self.total)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.visible.soon()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.visible.hidden()

    # -- actions ---------------------------------------------------------------------------

    def selected_tenant(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.model.record(rows[0].row()).record.name

    def _selected(self) -> None:
        tenant = self.selected_tenant()
        self.window_apply.setEnabled(tenant is not None)
        self.window_apply.setText(
            f"Apply to {tenant}" if tenant else "Select a tenant to apply this to"
        )

    def window_limit(self) -> Limit:
        return limit_for_window(
            self.window_count.value(),
            float(self.window_unit.currentData()),
            self.window_share.value() / 100,
        )

    def _update_window_result(self) -> None:
        try:
            limit = self.window_limit()
        except ConfigError as exc:
            self.window_result.setText(exc.message)
            return
        self.window_result.setText(
            f"rate {fmt_rate(limit.rate_per_s)}, burst {limit.burst:g}: never more than "
            f"{self.window_count.value():,} in any {self.window_unit.currentText()}."
        )

    def apply_window_limit(self) -> None:
        tenant = self.selected_tenant()
        if tenant is not None:
            self.bridge.set_tenant_limit(tenant, self.window_limit())

    def tenant_add(self) -> None:
        name = self.new_name.text().strip()
        try:
            if not name:
                raise ConfigError("give the new tenant a name.")
            limit = limit_from_fields(self.new_rate.text(), self.new_burst.text())
        except ConfigError as exc:
            self.bridge.report_error(exc.message)
            return
        self.bridge.tenant_add(name, limit)
        self.new_name.clear()

    def tenant_import(self) -> None:
        """Ask for a JSON-lines file and import it; a bad line is told in the message bar."""
        path, _ = QFileDialog.getOpenFileName(
            self, "Import tenants", "", "JSON lines (*.jsonl *.json *.txt);;All files (*)"
        )
        if path:
            self.bridge.tenant_import(path, self.import_update.isChecked())

    def pair_limit_set(self) -> None:
        tenant, provider = self.pair_tenant.currentText(), self.pair_provider.currentText()
        try:
            if not tenant or not provider:
                raise ConfigError("choose a tenant and a provider first.")
            limit = limit_from_fields(self.pair_rate.text(), self.pair_burst.text())
        except ConfigError as exc:
            self.bridge.report_error(exc.message)
            return
        self.bridge.pair_limit_set(tenant, provider, limit)


def _name(row: object) -> str:
    assert isinstance(row, TenantRow)
    return row.record.name


def _refill(combo: QComboBox, names: list[str]) -> None:
    current = combo.currentText()
    if [combo.itemText(i) for i in range(combo.count())] == names:
        return
    combo.clear()
    combo.addItems(names)
    if current in names:
        combo.setCurrentText(current)
