"""The console's Suppressions view against a real engine on a temporary SQLite store: a tenant's
list is shown masked, a recipient is suppressed (typed, or from a file), a notification to it is
``suppressed``, and an entry is removed after a second click; bad input says one sentence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine import NotificationState
from testkit.ui import OFFSCREEN_NOISE, Console, console
from ui.views.suppressions import SuppressionsView

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)

DEVICE = "f" * 64  # an APNs-like device token


@pytest.fixture
def harness(qtbot: QtBot, tmp_path: Path) -> Iterator[Console]:
    with console(qtbot, tmp_path) as c:
        c.seed()
        yield c


def open_view(c: Console) -> SuppressionsView:
    assert c.window is not None
    view = c.window.suppressions_view
    c.window.tabs.setCurrentWidget(view)
    return view


def cells(view: SuppressionsView) -> list[list[str]]:
    model = view.model
    return [
        [str(model.index(r, col).data()) for col in range(model.columnCount())]
        for r in range(model.rowCount())
    ]


def test_suppress_show_and_remove(harness: Console, tmp_path: Path) -> None:
    c = harness
    view = open_view(c)
    view.add_button.click()
    assert "Name the tenant" in view.message.text()  # nothing asked of the engine
    view.tenant.setEditText("acme")
    c.wait(lambda: view.provider.count() == 1)
    view.add_button.click()
    assert "Type the recipient" in view.message.text()

    view.recipient.setText(DEVICE)
    view.reason.setText("uninstalled")
    view.add_button.click()
    c.wait(lambda: view.model.rowCount() == 1)
    assert "Suppressed 1 recipient of acme for sim" in view.message.text()
    [row] = cells(view)
    assert row[1:4] == ["sim", row[2], "operator"] and row[6] == "uninstalled"
    assert DEVICE not in row[2] and "*" in row[2]  # masked
    result = c.run(c.engine.enqueue("acme", "sim", DEVICE, {"body": "hi"}, key="k"))
    assert result.suppressed
    assert c.run(c.engine.notification("acme", result.id)).state is NotificationState.SUPPRESSED

    listing = tmp_path / "bounces.txt"
    listing.write_text("a@example.com\n\nb@example.com\n")
    view.import_file(listing)
    c.wait(lambda: view.model.rowCount() == 3)
    assert "Suppressed 2 recipients" in view.message.text()
    assert [r[6] for r in cells(view)][:2] == ["imported from bounces.txt"] * 2
    view.import_file(tmp_path / "missing.txt")
    assert view.message.text().startswith("Cannot read missing.txt")
    view.grab().save(str(tmp_path / "suppressions.png"))

    view.table.selectRow(2)  # the device token, the oldest
    view.remove_button.click()
    assert "again?" in view.remove_button.text()  # the first click only asks
    assert len(c.run(c.engine.suppressions("acme"))) == 3
    view.remove_button.click()
    c.wait(lambda: view.model.rowCount() == 2)
    assert "Removed 1 entry from acme's list" in view.message.text()
    queued = c.run(c.engine.enqueue("acme", "sim", DEVICE, {}, key="k2"))
    assert not queued.suppressed
    actions = [e.action for e in c.run(c.engine.audit_entries())]
    assert actions.count("suppression.add") == 2 and "suppression.remove" in actions

    # Suppressed again: the notification queued to it meanwhile is suppressed too, and the
    # view says so.
    view.recipient.setText(DEVICE)
    view.add_button.click()
    c.wait(lambda: view.model.rowCount() == 3)
    c.wait(lambda: "queued to them will not be sent" in view.message.text())
    assert "Suppressed 1 recipient of acme for sim. 1 notification queued" in view.message.text()
    assert c.run(c.engine.notification("acme", queued.id)).state is NotificationState.SUPPRESSED
    view.grab().save(str(tmp_path / "suppressions-queued.png"))

    view.tenant.setEditText("globex")  # another tenant's list is its own
    view.reload()
    c.wait(lambda: view.model.rowCount() == 0)
    assert view.count.text() == "0 suppressed for globex"
    view.tenant.setEditText("nobody")
    view.reload()
    c.wait(lambda: bool(c.errors))
    assert c.errors == ["no tenant named 'nobody'."]
