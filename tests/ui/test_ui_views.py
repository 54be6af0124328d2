"""Every view of the console against a real engine on a temporary store."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit
from pytestqt.qtbot import QtBot

from app.demo import DEMO_TENANTS, seed_demo
from engine import BucketKey, EngineState, Limit
from engine.core.present import MASKED_VALUE as MASKED  # the CLI's and the console's mask
from testkit.ui import OFFSCREEN_NOISE, console
from ui import MainWindow

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


@pytest.mark.slow
def test_dashboard_draws_every_series_once(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        dashboard = c.window.dashboard
        c.wait(lambda: len(c.bridge.history) >= 3)
        note = dashboard.depth_plot.note
        assert note is not None and "nothing has queued" in note.toPlainText().lower()
        for i in range(4):  # not dispatching: they stay queued
            c.run(c.engine.enqueue("acme", "sim", f"u{i}@example.com"))
        c.wait(lambda: "queued:acme" in dashboard.depth_plot.curves)
        assert "queued:globex" not in dashboard.depth_plot.curves  # nothing queued there
        curves = dict(dashboard.depth_plot.curves)
        queued = dashboard.depth_plot.curves["queued:acme"]
        samples = len(c.bridge.history)
        c.wait(lambda: len(c.bridge.history) > samples + 2)
        assert dashboard.depth_plot.curves == curves  # the same curve objects, fed new data
        assert dashboard.depth_plot.curves["queued:acme"] is queued
        x, _ = queued.getData()
        assert x is not None and len(x) >= samples and x[-1] <= 0  # seconds before now
        assert dashboard.fill_plot.curves == {}  # no bucket ran low: nothing to single out
        assert dashboard.fill_plot.note is not None
        assert "nearly full" in dashboard.fill_plot.note.toPlainText()
        assert [lv.key for lv in dashboard.gauges.levels] == [BucketKey.for_tenant("acme")]
        assert dashboard.stats["queued"].value.text() == "4"
        assert dashboard.last_refresh_s > 0

        dashboard.live_button.click()  # pause the live view
        assert dashboard.live_button.text() == "Resume live view"
        qtbot.wait(150)  # the plot updates already scheduled run first
        frozen = queued.getData()[0]
        samples = len(c.bridge.history)
        c.wait(lambda: len(c.bridge.history) > samples + 2)  # sampling goes on
        assert queued.getData()[0] is frozen  # the plots do not move
        c.window.live_action.trigger()  # Ctrl+Space: resume
        assert dashboard.live_button.text() == "Pause live view"
        c.wait(lambda: queued.getData()[0] is not frozen)


def test_tenants_view_adds_applies_window_helper_and_pair_limits(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        view = c.window.tenants_view
        c.window.tabs.setCurrentWidget(view)
        view.new_name.setText("initech")
        view.new_rate.setText("300/min")
        view.add_button.click()
        c.wait(lambda: view.model.rowCount() == 3)
        assert c.run(c.engine.store.config.tenant("initech")).limit == Limit(5, 5)

        view.table.selectRow(0)  # acme, by name
        assert view.selected_tenant() == "acme"
        view.window_count.setValue(600)
        view.window_unit.setCurrentIndex(1)  # per minute
        view.window_share.setValue(10)
        assert "rate 9/s, burst 60" in view.window_result.text()
        view.window_apply.click()
        c.wait(lambda: c.bridge.limits.get(BucketKey.for_tenant("acme")) == Limit(9, 60))

        c.wait(lambda: view.pair_provider.currentText() == "sim")
        view.pair_tenant.setCurrentText("globex")
        view.pair_rate.setText("3")
        view.pair_set.click()
        c.wait(lambda: view.pair_list.count() == 1)
        assert view.pair_list.item(0).text() == "globex on sim: 3/s burst 3"
        levels = c.run(c.engine.limiter.levels())
        assert BucketKey.for_pair("globex", "sim") in {lv.key for lv in levels}

        view.new_name.setText("bad name!")
        view.add_button.click()
        c.wait(lambda: c.errors)
        assert "not valid" in c.errors[-1]
        assert c.window.bar.isVisible()
        assert "bad name" in c.window.bar.label.text()


def test_providers_view_adds_masks_secrets_and_test_sends(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        view = c.window.providers_view
        c.window.tabs.setCurrentWidget(view)
        view.new_provider()
        view.name.setText("hook")
        view.kind.setCurrentText("webhook")
        keys = [view.options.item(r, 0) for r in range(view.options.rowCount())]
        assert [k.text() for k in keys if k is not None] == ["url", "timeout_s"]
        url = view.options.item(0, 1)
        assert url is not None
        url.setText("https://hooks.example/omnipost")
        secret = view.secrets.cellWidget(0, 1)
        assert isinstance(secret, QLineEdit)
        assert secret.echoMode() == QLineEdit.EchoMode.Password
        secret.setText("s3cret-signing-key")
        view.rate.setText("5")
        view.save_button.click()
        assert secret.text() == ""  # the typed secret left the form at once
        c.wait(lambda: any(p.name == "hook" for p in c.bridge.providers))
        saved = c.run(c.engine.store.config.provider("hook", with_secrets=True))
        assert saved.secrets == {"signing_key": "s3cret-signing-key"}
        assert saved.limit == Limit(5, 5)
        c.wait(lambda: view.model.rowCount() == 2)
        row = next(r for r in range(2) if view.model.record(r).name == "hook")
        cells = [str(view.model.data(view.model.index(row, col))) for col in range(6)]
        assert cells[3] == "closed" and cells[5] == f"signing_key={MASKED}"
        view.table.selectRow(row)
        shown = view.secrets.cellWidget(0, 1)
        assert isinstance(shown, QLineEdit)
        assert shown.text() == "" and "saved" in shown.placeholderText()

        out = tmp_path / "out.jsonl"
        c.run(c.engine.provider_add("filed", "file", None, {"path": str(out)}))
        c.run(c.bridge.reload_config())
        c.wait(lambda: view.model.rowCount() == 3)
        row = next(r for r in range(3) if view.model.record(r).name == "filed")
        view.table.selectRow(row)
        view.test_recipient.setText("ops@example.com")
        view.test_button.click()
        c.wait(lambda: "delivered" in view.test_result.text())
        assert "ops@example.com" not in view.test_result.text()  # masked
        assert out.read_text().count("\n") == 1


@pytest.mark.slow
def test_dispatch_controls_start_pause_stop_and_start_again(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        window = c.window
        assert window.start_action.isEnabled() and not window.pause_action.isEnabled()
        window.start_action.trigger()
        c.wait(window.pause_action.isEnabled)
        state = c.engine.state  # not narrowed for good: the state changes below
        assert state == EngineState.RUNNING
        window.concurrency.setValue(5)
        assert c.engine.concurrency == 5

        window.tabs.setCurrentWidget(window.workers_view)
        workers = window.workers_view
        c.wait(lambda: workers.model.rowCount() == 1)
        assert workers.model.data(workers.model.index(0, 0)) == c.engine.worker_id
        assert workers.model.data(workers.model.index(0, 0), Qt.ItemDataRole.FontRole).bold()

        window.pause_action.trigger()
        c.wait(lambda: window.start_action.text() == "Resume")
        assert c.engine.state == EngineState.PAUSED
        window.stop_action.trigger()
        c.wait(lambda: c.engine.state == EngineState.STOPPED and window.start_action.isEnabled())
        first = c.engine.worker_id
        window.start_action.trigger()  # a stopped engine is replaced by a fresh one
        c.wait(lambda: c.bridge.engine.state == EngineState.RUNNING)
        assert c.bridge.engine.worker_id != first
        assert c.bridge.engine.concurrency == 5
        c.engine = c.bridge.engine
        c.wait(lambda: "running" in window.state_label.text())
        assert c.errors == []


def test_log_panel_filters_kinds_and_text(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        panel = c.window.log_panel
        c.bridge.report_error("the store went away.")
        c.wait(lambda: any(e.text == "the store went away." for e in panel.model.entries()))
        c.wait(lambda: any(e.kind.value == "audit" for e in panel.model.entries()))
        panel.kinds[next(iter(panel.kinds))].setChecked(False)  # no deliveries
        for kind, box in panel.kinds.items():
            box.setChecked(kind.value == "error")
        assert panel.proxy.rowCount() == 1
        panel.search.setText("nothing like this")
        assert panel.proxy.rowCount() == 0


def test_settings_dialog_is_not_modal_and_applies_live(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        assert c.window is not None
        c.window.show_settings()
        dialog = c.window._settings_dialog
        assert dialog is not None and dialog.isVisible() and not dialog.isModal()
        dialog.refresh.setValue(250)
        dialog.history.setValue(120)
        dialog.store_url.setText("postgresql://ops:hunter2@db.example/omnipost")
        dialog.apply()
        assert c.bridge.interval_ms == 250
        assert c.bridge.history_s == pytest.approx(120, abs=0.5)
        assert "hunter2" not in dialog.store_url.text()  # shown masked from now on
        dialog.apply()  # unchanged masked text keeps the saved URL
        stored = c.settings()
        assert stored.value("console/refresh_ms") in (250, "250")
        assert "hunter2" in str(stored.value("console/store_url"))


def test_window_state_is_kept_and_shortcuts_switch_views(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        assert c.window is not None
        window = c.window
        window.resize(760, 580)  # the offscreen screen is 800 x 600
        assert window.size().width() < 1000
        window.tabs.setCurrentIndex(3)
        window.save_window_state()
        again = MainWindow(c.bridge, c.settings())
        qtbot.addWidget(again)
        assert again.tabs.currentIndex() == 3
        assert again.size() == window.size()
        shortcuts = {a.shortcut().toString() for a in window.actions()}
        assert {"Ctrl+Return", "Ctrl+P", "Ctrl+.", "F5", "Ctrl+1", "Ctrl+6", "Ctrl+Q"} <= shortcuts
        with qtbot.waitActive(window):
            window.activateWindow()
        QTest.keyClick(window.tabs, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
        c.wait(lambda: window.tabs.currentIndex() == 1)


def test_an_empty_store_offers_the_demo(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path, window=False) as c:
        c.bridge._seed_demo = seed_demo  # as the composition root passes it
        c.window = MainWindow(c.bridge, c.settings())
        qtbot.addWidget(c.window)
        c.window.show()
        c.run(c.bridge.refresh())
        c.wait(lambda: c.window is not None and c.window.bar.isVisible())
        assert "demo" in c.window.bar.label.text()
        c.window.bar.accept_button.click()
        c.wait(lambda: len(c.bridge.providers) == 3)
        assert {p.name for p in c.bridge.providers} == {"sms-sim", "email-sim", "push-sim"}
        assert len(c.bridge.tenants) == len(DEMO_TENANTS)
