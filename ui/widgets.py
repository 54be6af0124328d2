"""Small widgets shared by the views: a message bar with actions (the non-modal confirmation),
a line edit that validates as you type, and the limit form fields."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from engine import ConfigError

__all__ = ["CheckedEdit", "MessageBar", "ParseValidator"]


class ParseValidator(QValidator):
    """Acceptable when ``parse(text)`` succeeds; Intermediate otherwise, so typing goes on.
    ``problem`` holds the sentence of the last refusal."""

    def __init__(self, parse: Callable[[str], object], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parse = parse
        self.problem = ""

    def validate(self, text: str, pos: int) -> object:
        try:
            self._parse(text)
        except ConfigError as exc:
            self.problem = exc.message
            return QValidator.State.Intermediate
        self.problem = ""
        return QValidator.State.Acceptable


class CheckedEdit(QLineEdit):
    """A line edit that says what is wrong while you type: a red frame and the sentence in
    its tooltip (and in ``problem``)."""

    def __init__(
        self, parse: Callable[[str], object], placeholder: str = "", parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.checker = ParseValidator(parse, self)
        self.setValidator(self.checker)
        self.setPlaceholderText(placeholder)
        self._hint = ""
        self.textChanged.connect(self._show_state)
        self._show_state(self.text())

    def setToolTip(self, text: str) -> None:
        self._hint = text
        super().setToolTip(text)

    @property
    def problem(self) -> str:
        self.checker.validate(self.text(), 0)
        return self.checker.problem

    def _show_state(self, text: str) -> None:
        problem = self.problem
        self.setStyleSheet("QLineEdit { border: 1px solid #d64545; }" if problem else "")
        super().setToolTip(problem or self._hint)


class MessageBar(QFrame):
    """A bar above a view with a sentence and up to two buttons. ``ask`` replaces a modal
    dialog: the view keeps working while the question waits."""

    accepted = Signal()

    STYLES = {
        "info": "background: rgba(78,121,167,40); border: 1px solid rgba(78,121,167,120);",
        "warn": "background: rgba(237,201,72,50); border: 1px solid rgba(224,160,48,160);",
        "error": "background: rgba(214,69,69,40); border: 1px solid rgba(214,69,69,140);",
    }

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("MessageBar")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.accept_button = QPushButton()
        self.reject_button = QPushButton("Cancel")
        self.accept_button.clicked.connect(self._accept)
        self.reject_button.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.accept_button)
        layout.addWidget(self.reject_button)
        self._on_accept: Callable[[], object] | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.hide)
        self.hide()

    def _style(self, level: str) -> None:
        self.setStyleSheet(f"#MessageBar {{ {self.STYLES[level]} border-radius: 4px; }}")

    def ask(
        self, question: str, action: str, on_accept: Callable[[], object], level: str = "warn"
    ) -> None:
        """Show ``question`` with ``action`` and Cancel; ``on_accept`` runs on ``action``."""
        self._timer.stop()
        self._style(level)
        self.label.setText(question)
        self.accept_button.setText(action)
        self.accept_button.show()
        self.reject_button.setText("Cancel")
        self.reject_button.show()
        self._on_accept = on_accept
        self.show()
        self.accept_button.setFocus()

    def tell(self, text: str, level: str = "info", timeout_ms: int = 0) -> None:
        """Show ``text`` with a Close button; it hides itself after ``timeout_ms`` (0: never)."""
        self._style(level)
        self.label.setText(text)
        self.accept_button.hide()
        self.reject_button.setText("Close")
        self.reject_button.show()
        self._on_accept = None
        self.show()
        if timeout_ms:
            self._timer.start(timeout_ms)

    def offer(self, text: str, action: str, on_accept: Callable[[], object]) -> None:
        """Like ``ask`` but as a suggestion (``info`` colours, a Dismiss button)."""
        self.ask(text, action, on_accept, level="info")
        self.reject_button.setText("Dismiss")

    def _accept(self) -> None:
        on_accept, self._on_accept = self._on_accept, None
        self.hide()
        if on_accept is not None:
            on_accept()
