"""Open circuits where the operator cannot miss it: one red line per paused provider.

A provider whose circuit is open (or half-open, probing) is not sending: its notifications wait
in the queue. The banner says which provider, since when, why (the last error, already redacted
by the engine), and when the next probe is due, with a "Resume now" button per provider. It
hides itself when every circuit is closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engine import Circuit, CircuitState
from ui.fmt import fmt_age, fmt_duration

__all__ = ["CircuitBanner", "describe"]

_STYLE = (
    "#CircuitBanner { background: rgba(214,69,69,40); border: 1px solid rgba(214,69,69,140);"
    " border-radius: 4px; }"
)


def describe(health: Circuit, now: float) -> str:
    """One sentence about a provider that is not sending (``now`` is unix seconds)."""
    what = "probing" if health.state == CircuitState.HALF_OPEN else "paused (circuit open)"
    parts = [f"Provider <b>{_escape(health.provider)}</b> is {what}"]
    if health.since is not None:
        since = time.strftime("%H:%M:%S", time.localtime(health.since))
        parts.append(f" since {since} ({fmt_age(health.since, now)})")
    failures = "failure" if health.failures == 1 else "failures"
    parts.append(f" after {health.failures} {failures}")
    if health.last_error:
        parts.append(f": {_escape(health.last_error)}")
    parts.append(". Its notifications stay queued and spend no attempt.")
    if health.state == CircuitState.OPEN and health.next_probe_at is not None:
        wait = health.next_probe_at - now
        parts.append(
            f" Next probe in {fmt_duration(wait)}." if wait >= 1 else " Next probe is due now."
        )
    return "".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Row(QWidget):
    def __init__(self, provider: str, resume: Callable[[str], object]) -> None:
        super().__init__()
        self.provider = provider
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.button = QPushButton("Resume now")
        self.button.setToolTip(
            f"Close {provider}'s circuit now: its queued notifications are sent again at once."
        )
        self.button.clicked.connect(lambda: resume(provider))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)


class CircuitBanner(QFrame):
    """Shows every provider whose circuit is not closed; ``resume(provider)`` on the button."""

    def __init__(self, resume: Callable[[str], object], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CircuitBanner")
        self.setStyleSheet(_STYLE)
        self._resume = resume
        self._rows: dict[str, _Row] = {}
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(10, 6, 6, 6)
        self.hide()

    def show_circuits(self, health: Sequence[Circuit], now: float | None = None) -> None:
        """Update from the latest snapshot's health (called on every sample: the countdown)."""
        now = time.time() if now is None else now
        paused = {h.provider: h for h in health if h.state != CircuitState.CLOSED}
        for name in [n for n in self._rows if n not in paused]:
            gone = self._rows.pop(name)
            self._layout.removeWidget(gone)
            gone.deleteLater()
        for name in sorted(paused):
            row = self._rows.get(name)
            if row is None:
                row = self._rows[name] = _Row(name, self._resume)
                self._layout.addWidget(row)
            row.label.setText(describe(paused[name], now))
        self.setVisible(bool(paused))

    def text(self) -> str:
        """What the banner says, one line per provider (for tests and screen readers)."""
        return "\n".join(self._rows[name].label.text() for name in sorted(self._rows))
