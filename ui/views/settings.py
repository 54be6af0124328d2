"""The settings window: refresh interval and history (applied at once), store and Redis URLs
(used on the next start). Non-modal: the console keeps running while it is open."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine import masked_url
from ui.settings import HISTORY_S, REFRESH_MS, ConsoleSettings

__all__ = ["SettingsDialog"]


class SettingsDialog(QDialog):
    applied = Signal(object)  # ConsoleSettings

    def __init__(self, settings: ConsoleSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("OmniPost settings")
        self._settings = settings
        self.refresh = QSpinBox()
        self.refresh.setRange(*REFRESH_MS)
        self.refresh.setSingleStep(100)
        self.refresh.setSuffix(" ms")
        self.history = QSpinBox()
        self.history.setRange(*HISTORY_S)
        self.history.setSuffix(" s")
        self.dispatch = QCheckBox("Start dispatching when the console opens")
        self.store_url = QLineEdit()
        self.store_url.setPlaceholderText("default: the SQLite file in the data directory")
        self.redis_url = QLineEdit()
        self.redis_url.setPlaceholderText("none: rate limits are kept in this process")
        form = QFormLayout()
        form.addRow("Refresh every", self.refresh)
        form.addRow("Keep history for", self.history)
        form.addRow(self.dispatch)
        form.addRow("Store URL", self.store_url)
        form.addRow("Redis URL", self.redis_url)
        note = QLabel(
            "Refresh and history apply at once. The store and Redis URLs apply the next time "
            "the console starts, unless --db or OMNIPOST_DB names a store. Passwords are "
            "shown masked."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Apply
            | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        apply = buttons.button(QDialogButtonBox.StandardButton.Apply)
        apply.clicked.connect(self.apply)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.load(settings)

    def load(self, settings: ConsoleSettings) -> None:
        self._settings = settings
        self.refresh.setValue(settings.refresh_ms)
        self.history.setValue(settings.history_s)
        self.dispatch.setChecked(settings.dispatch_on_open)
        self.store_url.setText(_shown(settings.store_url))
        self.redis_url.setText(_shown(settings.redis_url))

    def values(self) -> ConsoleSettings:
        store = self.store_url.text().strip()
        redis = self.redis_url.text().strip()
        return ConsoleSettings(
            refresh_ms=self.refresh.value(),
            history_s=self.history.value(),
            dispatch_on_open=self.dispatch.isChecked(),
            # an unchanged field still shows the masked URL: keep the saved one
            store_url=self._settings.store_url
            if store == _shown(self._settings.store_url)
            else store,
            redis_url=self._settings.redis_url
            if redis == _shown(self._settings.redis_url)
            else redis,
        ).clamped()

    def apply(self) -> None:
        self._settings = self.values()
        self.applied.emit(self._settings)
        self.load(self._settings)

    def _ok(self) -> None:
        self.apply()
        self.accept()


def _shown(url: str) -> str:
    return masked_url(url) if url and "@" in url else url
