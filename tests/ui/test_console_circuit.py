"""The console shows a provider whose circuit is open where the operator cannot miss it (a red
banner over every tab, and the providers' Circuit column), and "Resume now" closes it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engine import Circuit, CircuitState, EngineState, NotificationState
from testkit.ui import OFFSCREEN_NOISE, console
from ui.models import ProvidersModel, circuit_text
from ui.views.circuits import describe

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_banner_names_the_provider_why_and_the_next_probe() -> None:
    health = Circuit(
        "mail", CircuitState.OPEN, 1_000.0, "SMTP <STARTTLS> not supported", 1_030.0, 3
    )
    text = describe(health, now=1_010.0)
    assert "Provider <b>mail</b> is paused (circuit open)" in text
    assert "after 3 failures: SMTP &lt;STARTTLS&gt; not supported" in text
    assert "10.0 s ago" in text and "Next probe in 20.0 s." in text
    assert "Next probe is due now." in describe(health, now=1_030.5)
    probing = Circuit("mail", CircuitState.HALF_OPEN, 1_000.0, "", None, 3)
    assert "is probing" in describe(probing, now=1_010.0)
    assert circuit_text(None, 0.0) == "closed"
    assert circuit_text(health, 1_010.0) == "open, probe in 20.0 s"
    assert circuit_text(probing, 1_010.0) == "half-open (probing)"


@pytest.mark.slow
def test_an_open_circuit_shows_and_resume_now_closes_it(qtbot: QtBot, tmp_path: Path) -> None:
    port = closed_port()
    options = {
        "url": f"http://127.0.0.1:{port}/hook",
        "timeout_s": "2",
        "circuit_failures": "2",
        "circuit_backoff_s": "600",  # no probe during the test: it stays open until resumed
    }
    with console(qtbot, tmp_path, window=True) as c:
        c.seed()
        c.run(c.engine.provider_add("hook", "webhook", None, options))
        c.run(c.bridge.reload_config())
        for i in range(3):
            c.run(c.engine.enqueue("acme", "hook", f"user{i}@example.com", key=f"k{i}"))
        window = c.window
        assert window is not None
        window.show()
        assert not window.circuits.isVisible()
        c.run(c.bridge.start())

        c.wait(window.circuits.isVisible)
        text = window.circuits.text()
        assert "Provider <b>hook</b> is paused (circuit open)" in text
        assert "Next probe in" in text and "spend no attempt" in text
        model = window.providers_view.model
        assert isinstance(model, ProvidersModel)
        row = next(i for i, p in enumerate(model.rows) if p.name == "hook")
        cell = model.index(row, ProvidersModel.CIRCUIT)
        assert str(model.data(cell)).startswith("open, probe in")
        assert "failures in a row" in str(model.data(cell, Qt.ItemDataRole.ToolTipRole))
        window.grab().save(str(tmp_path / "circuit.png"))
        window.tabs.setCurrentWidget(window.providers_view)
        window.grab().save(str(tmp_path / "circuit-providers.png"))

        depth = {d.state: d.count for d in c.run(c.engine.store.notifications.depth())}
        assert depth.get(NotificationState.DEAD, 0) == 0
        assert depth.get(NotificationState.QUEUED, 0) + depth.get(NotificationState.LEASED, 0)

        c.run(c.bridge.pause())  # so that the resumed circuit is not opened again at once
        assert c.engine.state is EngineState.PAUSED
        row_widget = window.circuits._rows["hook"]
        row_widget.button.click()
        c.wait(lambda: not window.circuits.isVisible())
        health = c.run(c.engine.circuit_states())["hook"]
        assert health.state is CircuitState.CLOSED
        audit = c.run(c.engine.audit_entries())
        assert any(e.action == "provider.resume" for e in audit)
        assert c.errors == []
