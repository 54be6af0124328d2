"""The console's API keys view against a real engine on a temporary SQLite store: a key is
made and shown once with a copy button, listed without the key, revoked after a second click."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from engine import Limit
from testkit.ui import OFFSCREEN_NOISE, Console, console
from ui.views.api_keys import ApiKeysView

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)

KEY = re.compile(r"op_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


@pytest.fixture
def harness(qtbot: QtBot, tmp_path: Path) -> Iterator[Console]:
    with console(qtbot, tmp_path) as c:
        c.seed()
        yield c


def open_view(c: Console) -> ApiKeysView:
    assert c.window is not None
    view = c.window.api_keys_view
    c.window.tabs.setCurrentWidget(view)
    return view


def cells(view: ApiKeysView) -> list[list[str]]:
    table = view.table
    found = []
    for r in range(table.rowCount()):
        items = [table.item(r, col) for col in range(table.columnCount())]
        found.append([item.text() if item is not None else "" for item in items])
    return found


def test_a_key_is_made_shown_once_copied_and_revoked(harness: Console, tmp_path: Path) -> None:
    c = harness
    view = open_view(c)
    view.create_button.click()
    assert "Name the tenant" in view.message.text()  # nothing asked of the engine

    view.tenant.setText("acme")
    view.name.setText("billing")
    view.scopes["read"].setChecked(False)
    view.create_button.click()
    c.wait(view.key_box.isVisible)
    key = view.new_key.text()
    assert KEY.fullmatch(key)
    c.wait(lambda: view.table.rowCount() == 1)
    [row] = cells(view)
    assert row[1:5] == [key[:15], "acme", "billing", "send"] and row[7] == "-"
    assert not any(key in cell for cell in row)  # the table shows the prefix, never the key
    view.grab().save(str(tmp_path / "api_keys.png"))

    view._copy()
    assert QGuiApplication.clipboard().text() == key
    view._forget_key()
    assert not view.key_box.isVisible() and view.new_key.text() == ""

    view.table.selectRow(0)
    view.revoke_button.click()
    assert "for good?" in view.revoke_button.text()  # the first click only asks
    [[record]] = [[r for r in c.run(c.engine.api_keys("acme"))]]
    assert record.revoked_at is None
    view.revoke_button.click()
    c.wait(lambda: cells(view) and cells(view)[0][7] != "-")
    assert c.run(c.engine.api_key_check(key)) is None
    actions = [e.action for e in c.run(c.engine.audit_entries())]
    assert "apikey.create" in actions and "apikey.revoke" in actions
    assert c.errors == []


def test_an_unknown_tenant_is_one_sentence(harness: Console) -> None:
    c = harness
    view = open_view(c)
    view.tenant.setText("nobody")
    view.create_button.click()
    c.wait(lambda: bool(c.errors))
    assert c.errors == ["no tenant named 'nobody'."]
    assert not view.key_box.isVisible()


def test_a_tenants_api_limits_are_shown_and_set(harness: Console, tmp_path: Path) -> None:
    c = harness
    view = open_view(c)
    view.tenant.setText("acme")
    view.reload()
    c.wait(lambda: view.limits_now.text().startswith("acme:"))
    assert view.limits_now.text().count("the server's default") == 2

    view.max_queued.setText("many")
    view.apply_limits.click()
    assert "queue cap must be a whole number" in view.message.text()
    view.max_queued.setText("1,000")
    view.api_burst.setText("80")
    view.apply_limits.click()
    assert "burst needs a rate" in view.message.text()  # nothing asked of the engine
    assert c.run(c.engine.tenant("acme")).api_limit is None

    view.api_rate.setText("3000/min")
    view.apply_limits.click()
    c.wait(lambda: "50/s burst 80" in view.limits_now.text())
    assert "1,000 notifications queued" in view.limits_now.text()
    record = c.run(c.engine.tenant("acme"))
    assert (record.api_limit, record.max_queued) == (Limit(50.0, 80.0), 1000)
    view.grab().save(str(tmp_path / "api_keys-limits.png"))

    for field in (view.api_rate, view.api_burst, view.max_queued):
        field.clear()
    view.apply_limits.click()  # empty: back to the server's defaults
    c.wait(lambda: view.limits_now.text().count("the server's default") == 2)
    record = c.run(c.engine.tenant("acme"))
    assert (record.api_limit, record.max_queued) == (None, None)
    assert c.errors == []


def test_the_limits_of_a_tenant_that_does_not_exist_are_one_sentence(harness: Console) -> None:
    c = harness
    view = open_view(c)
    view.tenant.setText("nobody")
    view.api_rate.setText("5/s")
    view.apply_limits.click()
    c.wait(lambda: bool(c.errors))
    assert "nobody" in c.errors[-1] and "Traceback" not in c.errors[-1]
