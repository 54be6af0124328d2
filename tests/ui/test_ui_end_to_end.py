"""End to end through the window: what an operator does, and what the engine and store do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from engine import BucketKey, Limit, NotificationState
from testkit.ui import OFFSCREEN_NOISE, console
from ui.models import TenantsModel
from ui.widgets import CheckedEdit

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


@pytest.mark.slow
def test_editing_a_rate_in_the_table_changes_the_bucket_and_the_store(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        view = c.window.tenants_view
        c.window.tabs.setCurrentWidget(view)
        c.wait(lambda: view.model.rowCount() == 2)
        acme = view.model.index(0, TenantsModel.RATE)
        assert acme.data() == "20/s"

        view.table.setCurrentIndex(acme)
        view.table.edit(acme)
        editor = view.table.findChild(CheckedEdit)
        assert editor is not None
        editor.clear()
        QTest.keyClicks(editor, "12/fortnight")
        assert "cannot read" in editor.problem  # said while typing, nothing sent
        assert "d64545" in editor.styleSheet()
        editor.clear()
        QTest.keyClicks(editor, "120/min")
        assert editor.problem == ""
        QTest.keyClick(editor, Qt.Key.Key_Return)

        def bucket_rate() -> float | None:
            levels = c.run(c.engine.limiter.levels())
            key = BucketKey.for_tenant("acme")
            return next((lv.rate_per_s for lv in levels if lv.key == key), None)

        c.wait(lambda: bucket_rate() == 2.0)
        assert c.run(c.engine.store.config.tenant("acme")).limit == Limit(2, 5)
        audit = c.run(c.engine.store.audit.entries(limit=5))
        assert (audit[0].action, audit[0].actor) == ("tenant.set", "console:test")
        c.wait(lambda: view.model.index(0, TenantsModel.RATE).data() == "2/s")
        log = c.window.log_panel.model
        c.wait(lambda: any("tenant.set acme" in e.text for e in log.entries()))
        assert c.errors == []


@pytest.mark.slow
def test_a_burst_from_the_simulator_moves_gauges_and_depth(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        assert c.window is not None
        window = c.window
        window.start_action.trigger()
        c.wait(lambda: c.engine.state == "running")
        sim = window.simulator
        window.tabs.setCurrentWidget(sim)
        c.wait(lambda: sim.provider.currentText() == "sim" and len(sim.selected_tenants()) == 2)
        sim.count.setValue(60)
        sim.pattern.setCurrentIndex(0)  # spike
        sim.start_button.click()
        window.tabs.setCurrentWidget(window.dashboard)
        dashboard = window.dashboard

        def acme_fill() -> float:
            levels = [lv for lv in dashboard.gauges.levels if lv.key.tenant == "acme"]
            return levels[0].fill if levels else 1.0

        c.wait(lambda: acme_fill() < 0.5)  # the gauge of acme's bucket drains
        c.wait(lambda: any(d.queued > 0 for d in dashboard.depth_model.rows))
        c.wait(lambda: c.bridge.simulation is not None and c.bridge.simulation.done, 20_000)
        status = c.bridge.simulation
        assert status is not None and status.actual_s is not None
        assert status.forecast is not None
        assert status.forecast.seconds == pytest.approx((60 - 5) / 20)  # acme's bucket
        assert status.actual_s >= status.forecast.seconds * 0.8
        queued = dashboard.depth_plot.curves["queued:acme"].getData()[1]
        assert np.nanmax(queued) > 0
        assert "fill:tenant:acme" in dashboard.fill_plot.curves  # it ran low: singled out
        window.tabs.setCurrentWidget(sim)
        assert "so far" not in sim.actual.text()
        assert sim.progress.value() == sim.progress.maximum() == 120
        assert c.errors == []


def test_retrying_a_dead_notification_from_the_table_delivers_it(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed({"latency_ms": "1", "permanent_rate": "1"})  # every send fails for good
        assert c.window is not None
        window = c.window
        c.run(c.bridge.start())
        for i in range(3):
            c.run(c.engine.enqueue("globex", "sim", f"user{i}@example.com"))
        c.wait(lambda: sum(d.dead for d in c.run(c.engine.snapshot()).depth) == 3)
        c.run(c.engine.provider_update("sim", options={"permanent_rate": ""}))  # fixed

        queue = window.queue_view
        window.tabs.setCurrentWidget(queue)
        c.wait(lambda: queue.model.rowCount() == 3)
        assert queue.model.data(queue.model.index(0, 3)) != "user2@example.com"  # masked
        queue.table.selectRow(0)
        chosen = queue.selected_ids()
        assert len(chosen) == 1
        queue.retry_selected.click()

        def state(nid: int) -> NotificationState | None:
            tenant_id = c.engine.directory.tenant_id("globex")
            assert tenant_id is not None
            view = c.run(c.engine.store.notifications.get(tenant_id, nid))
            return None if view is None else view.state

        c.wait(lambda: state(chosen[0]) is NotificationState.DELIVERED)
        c.wait(lambda: queue.model.rowCount() == 2)

        queue.discard_all.click()  # asks first, in the bar above the table
        assert queue.bar.isVisible()
        assert "deleted for good" in queue.bar.label.text()
        assert queue.model.rowCount() == 2
        queue.bar.accept_button.click()
        c.wait(lambda: queue.model.rowCount() == 0)
        assert c.run(c.engine.dead()) == []
        assert c.errors == []
