"""The store and its retention: size on disk, how long finished rows are kept (checked as you
type; applied for every engine on the store and audited), and a prune pass on demand."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine import ConfigError, PruneReport, Retention, format_age, parse_age
from ui.bridge import Bridge
from ui.fmt import fmt_bytes, fmt_duration, fmt_when
from ui.state import StoreStatus
from ui.widgets import CheckedEdit

__all__ = ["WINDOWS", "StoreView", "prune_summary"]

# (Retention field, label, what the age counts from)
WINDOWS = (
    ("delivered_s", "Delivered notifications", "kept this long after delivery"),
    ("dead_s", "Dead letters", "kept this long after they died: the time left to retry them"),
    ("log_s", "Delivery log", "every send attempt, by when it was made"),
    ("audit_s", "Audit log", "who changed what, by when"),
    ("suppressions_s", "Suppressed recipients", "kept on the lists this long after being added"),
)
_PROBLEM_STYLE = "color: #d64545;"


def prune_summary(report: PruneReport) -> str:
    """One sentence for people: the rows deleted per kind and the bytes given back."""
    if report.total == 0:
        return "Nothing was old enough to delete."
    kinds = (  # the rare ones are said only when there are some
        (report.delivered, "delivered"),
        (report.dead, "dead"),
        (report.cancelled, "cancelled"),
        (report.suppressed or None, "suppressed"),
        (report.expired or None, "expired"),
        (report.delivery_log, "delivery-log"),
        (report.status_events or None, "status-event"),
        (report.audit_log, "audit"),
        (report.suppressions or None, "suppression-list"),
    )
    counts = [f"{n:,} {kind}" for n, kind in kinds if n is not None]
    verb = "Would delete" if report.dry_run else "Deleted"
    text = f"{verb} {', '.join(counts[:-1])} and {counts[-1]} rows"
    if not report.dry_run:
        text += f"; {fmt_bytes(report.freed_bytes)} given back to the disk"
    if not report.complete:
        text += " (stopped at its time budget: the next pass goes on)"
    return text + "."


def _differs(text: str, age_s: float | None) -> bool:
    """True when ``text`` is not an age, or a different one from ``age_s``."""
    try:
        return parse_age(text) != age_s
    except ConfigError:
        return True


class StoreView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._shown: Retention | None = None  # the windows as the store last had them
        boxes = QHBoxLayout()
        boxes.addWidget(self._store_box(), 2)
        boxes.addWidget(self._retention_box(), 3)
        layout = QVBoxLayout(self)
        layout.addLayout(boxes)
        layout.addStretch(1)
        bridge.store_changed.connect(self.set_status)
        bridge.retention_changed.connect(self.retention_set)
        bridge.pruned.connect(self.show_pruned)
        self._update()

    def _store_box(self) -> QGroupBox:
        box = QGroupBox("Store")
        self.store_url = QLabel("…")
        self.store_url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.store_url.setWordWrap(True)
        self.size_on_disk = QLabel("…")
        self.free_space = QLabel("…")
        self.free_space.setToolTip(
            "Pages SQLite freed inside the file and reuses first; pruning gives them back."
        )
        self.kept = QLabel("…")
        self.last_pruned = QLabel("…")
        self.prune_button = QPushButton("Prune now")
        self.prune_button.setToolTip("Delete every finished row older than its window, now.")
        self.prune_button.clicked.connect(self.prune_now)
        self.prune_result = QLabel()
        self.prune_result.setWordWrap(True)
        self.prune_result.hide()  # until a pass reports
        every = fmt_duration(self.bridge.engine.settings.prune_s)
        hint = QLabel(f"Every engine on this store also prunes by itself about every {every}.")
        hint.setWordWrap(True)
        form = QFormLayout()
        form.addRow("URL", self.store_url)
        form.addRow("Size on disk", self.size_on_disk)
        form.addRow("Free inside the file", self.free_space)
        form.addRow("Notifications kept", self.kept)
        form.addRow("Last pruned", self.last_pruned)
        layout = QVBoxLayout(box)
        layout.addLayout(form)
        prune = QHBoxLayout()
        prune.addWidget(self.prune_button)
        prune.addStretch(1)
        layout.addLayout(prune)
        layout.addWidget(self.prune_result)
        layout.addWidget(hint)
        layout.addStretch(1)
        return box

    def _retention_box(self) -> QGroupBox:
        box = QGroupBox("Retention")
        intro = QLabel(
            "How long finished rows are kept: an age like 12h, 7d or 2w; 0 or forever keeps "
            "them forever. What you apply holds for every engine on this store and is written "
            "to the audit log."
        )
        intro.setWordWrap(True)
        grid = QGridLayout()
        grid.setColumnStretch(2, 1)
        self.edits: dict[str, CheckedEdit] = {}
        self.notes: dict[str, QLabel] = {}
        for row, (name, label, _) in enumerate(WINDOWS):
            edit = CheckedEdit(parse_age, "7d, 12h, forever…")
            edit.setMaximumWidth(140)
            edit.setAccessibleName(label)
            edit.textChanged.connect(self._update)
            edit.returnPressed.connect(self.apply)
            note = QLabel()
            note.setWordWrap(True)
            self.edits[name], self.notes[name] = edit, note
            grid.addWidget(QLabel(label), row, 0)
            grid.addWidget(edit, row, 1)
            grid.addWidget(note, row, 2)
        self.apply_button = QPushButton("Apply")
        self.apply_button.clicked.connect(self.apply)
        self.revert_button = QPushButton("Revert")
        self.revert_button.clicked.connect(self.revert)
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.revert_button)
        buttons.addStretch(1)
        self.never_deleted = QLabel(
            "Queued and leased notifications are never deleted, whatever their age; an "
            "idempotency key is remembered as long as its notification is kept."
        )
        self.never_deleted.setWordWrap(True)
        layout = QVBoxLayout(box)
        layout.addWidget(intro)
        layout.addLayout(grid)
        layout.addLayout(buttons)
        layout.addWidget(self.never_deleted)
        layout.addStretch(1)
        return box

    # -- data in ---------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.bridge.load_store()

    def set_status(self, status: StoreStatus) -> None:
        size = status.size
        self.store_url.setText(status.url)
        self.size_on_disk.setText(fmt_bytes(size.used_bytes))
        self.free_space.setText(
            "— (PostgreSQL reuses freed space itself)"
            if size.free_bytes is None
            else fmt_bytes(size.free_bytes)
        )
        self.kept.setText(f"{size.notifications:,}")
        self.last_pruned.setText(fmt_when(status.last_pruned_at))

    def retention_set(self, retention: Retention) -> None:
        """Show the store's windows; a field the operator is editing keeps its text, unless
        the store now has what it says."""
        old, self._shown = self._shown, retention
        for name, edit in self.edits.items():
            new_s = getattr(retention, name)
            editing = old is not None and _differs(edit.text(), getattr(old, name))
            if not editing or not _differs(edit.text(), new_s):
                edit.setText(format_age(new_s))
        self._update()

    def show_pruned(self, report: PruneReport) -> None:
        self.prune_result.setText(prune_summary(report))
        self.prune_result.show()

    # -- the form --------------------------------------------------------------------------

    def edited(self) -> dict[str, float | None]:
        """The windows the form changes, in seconds (None: forever). Raises ``ConfigError``
        with one sentence when a field is not an age."""
        ages: dict[str, float | None] = {}
        for name, edit in self.edits.items():
            age_s = parse_age(edit.text())
            if self._shown is None or age_s != getattr(self._shown, name):
                ages[name] = age_s
        return ages

    def _update(self) -> None:
        invalid = pending = False
        for name, _, purpose in WINDOWS:
            edit = self.edits[name]
            problem = edit.problem if self._shown is not None else ""
            self.notes[name].setText(problem or purpose)
            self.notes[name].setStyleSheet(_PROBLEM_STYLE if problem else "")
            invalid |= bool(problem)
            pending |= self._shown is not None and _differs(edit.text(), getattr(self._shown, name))
            edit.setEnabled(self._shown is not None)
        self.apply_button.setEnabled(pending and not invalid)
        self.revert_button.setEnabled(pending)

    def apply(self) -> None:
        try:
            ages = self.edited()
        except ConfigError as exc:
            self.bridge.report_error(exc.message)
            return
        if ages:
            self.bridge.retention_set(ages)

    def revert(self) -> None:
        if self._shown is not None:
            for name, edit in self.edits.items():
                edit.setText(format_age(getattr(self._shown, name)))

    # -- pruning ---------------------------------------------------------------------------

    def prune_now(self) -> None:
        self.prune_button.setEnabled(False)
        self.prune_button.setText("Pruning…")
        self.prune_result.hide()
        self.bridge.prune().add_done_callback(self._pruned)

    def _pruned(self, _task: asyncio.Task[None]) -> None:
        self.prune_button.setEnabled(True)
        self.prune_button.setText("Prune now")
