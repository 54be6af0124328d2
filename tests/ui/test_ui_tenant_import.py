"""The tenants view's "Import…": a file chosen in a dialog is imported through the bridge, as
``omnipost tenant import`` does; a bad file is one sentence in the message bar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from engine import Limit
from testkit.ui import OFFSCREEN_NOISE, console
from ui.views.tenants import TenantsView

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


def write_lines(path: Path, *lines: dict[str, Any] | str) -> Path:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.slow
def test_import_button_imports_a_file_and_tells_a_bad_line(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen: list[Path] = []

    def pick(*_args: object) -> tuple[str, str]:
        return str(chosen[-1]), "JSON lines (*.jsonl *.json *.txt)"

    monkeypatch.setattr("ui.views.tenants.QFileDialog.getOpenFileName", pick)
    with console(qtbot, tmp_path) as c:
        c.seed()  # acme (20/s, burst 5) and globex
        assert c.window is not None
        view = c.window.tenants_view
        c.window.tabs.setCurrentWidget(view)
        c.wait(lambda: view.model.rowCount() == 2)
        notices: list[str] = []
        c.bridge.notice.connect(notices.append)

        chosen.append(
            write_lines(
                tmp_path / "good.jsonl",
                {"name": "initech", "rate": "300/min", "burst": 10},
                {"name": "hooli", "enabled": False},
            )
        )
        view.import_button.click()
        c.wait(lambda: view.model.rowCount() == 4)
        c.wait(lambda: "imported 2 tenants (2 added, 0 updated)" in notices)
        assert c.run(c.engine.store.config.tenant("initech")).limit == Limit(5, 10)
        assert not c.errors

        chosen.append(
            write_lines(
                tmp_path / "bad.jsonl",
                {"name": "newco"},
                "",
                {"name": "oops", "rate": "5/s", "burst": 0},
            )
        )
        view.import_button.click()
        c.wait(lambda: c.errors)
        assert c.errors[-1].startswith("line 3: burst must be a finite number of at least 1")
        assert c.window.bar.isVisible()
        assert c.window.bar.label.text().startswith("line 3: burst must be")
        names = {t.name for t in c.run(c.engine.tenants())}
        assert names == {"acme", "globex", "initech", "hooli"}  # newco, line 1, too is not in

        # A tenant that exists is refused unless "update existing" is ticked.
        chosen.append(write_lines(tmp_path / "again.jsonl", {"name": "acme", "rate": "2/s"}))
        view.import_button.click()
        c.wait(lambda: len(c.errors) == 2)
        assert c.errors[-1].startswith("line 1: tenant 'acme' already exists")
        view.import_update.setChecked(True)
        view.import_button.click()
        c.wait(lambda: "imported 1 tenant (0 added, 1 updated)" in notices)
        assert c.run(c.engine.store.config.tenant("acme")).limit == Limit(2, 2)


def test_a_cancelled_dialog_imports_nothing(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ui.views.tenants.QFileDialog.getOpenFileName", lambda *_args: ("", ""))
    with console(qtbot, tmp_path, window=False) as c:
        c.seed()
        calls: list[object] = []
        monkeypatch.setattr(c.bridge, "tenant_import", lambda *args: calls.append(args))
        view = TenantsView(c.bridge)
        qtbot.addWidget(view)
        view.import_button.click()
        assert calls == []
        assert not c.errors
