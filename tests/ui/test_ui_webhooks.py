"""The console's webhooks view against a real engine on a temporary SQLite store: an endpoint
is added (its secret shown once), tested against a loopback receiver, listed with its outbox,
disabled (the table says so, in red) and enabled, its recent events listed, removed after a
second click; a private address without the box ticked is one sentence, nothing added."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from testkit.ui import OFFSCREEN_NOISE, Console, console
from ui.views.webhooks import WebhooksView

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()
    server.server_close()


@pytest.fixture
def harness(qtbot: QtBot, tmp_path: Path) -> Iterator[Console]:
    with console(qtbot, tmp_path) as c:
        c.seed()
        yield c


def cells(view: WebhooksView) -> list[list[str]]:
    table = view.table
    return [
        [table.item(r, col).text() for col in range(table.columnCount())]  # type: ignore[union-attr]
        for r in range(table.rowCount())
    ]


def test_endpoints_are_added_tested_disabled_and_removed(
    harness: Console, receiver: str, tmp_path: Path
) -> None:
    c = harness
    assert c.window is not None
    view = c.window.webhooks_view
    c.window.tabs.setCurrentWidget(view)
    view.tenant.setText("acme")
    view.url.setText("https://169.254.169.254/latest")
    view._add()
    c.wait(lambda: "link-local" in c.errors[-1] if c.errors else False)
    assert c.run(c.engine.webhooks("acme")) == []
    c.errors.clear()

    view.url.setText(receiver)
    view.types.setText("delivered, dead")
    view.allow_private.setChecked(True)
    view._add()
    c.wait(view.secret_box.isVisible)
    secret = view.new_secret.text()
    assert secret.startswith("whsec_")
    c.wait(lambda: view.table.rowCount() == 1)
    [row] = cells(view)
    assert row[1:4] == [receiver, "delivered, dead", "enabled"]
    assert not any(secret in cell for cell in row)

    c.run(c.engine.enqueue("acme", "sim", "a@example.com", send_at=c.engine.clock.wall() + 60))
    c.run(c.engine.notification_cancel("acme", 1))  # not subscribed to cancellations: no event
    view.table.selectRow(0)
    view.test_button.click()
    c.wait(lambda: "answered 204" in view.message.text())

    view.toggle_button.click()
    c.wait(lambda: cells(view) and cells(view)[0][3].startswith("disabled"))
    assert cells(view)[0][3] == "disabled: disabled by an operator"
    assert view.toggle_button.text() == "Enable"
    view.grab().save(str(tmp_path / "webhooks.png"))
    view.toggle_button.click()
    c.wait(lambda: cells(view) and cells(view)[0][3] == "enabled")

    view.remove_button.click()
    assert "for good?" in view.remove_button.text()
    assert len(c.run(c.engine.webhooks("acme"))) == 1
    view.remove_button.click()
    c.wait(lambda: view.table.rowCount() == 0)
    actions = {e.action for e in c.run(c.engine.audit_entries())}
    assert {"webhook.add", "webhook.test", "webhook.disable", "webhook.remove"} <= actions
    assert c.errors == []
