"""The Queue view's cancel: the ``cancelled`` state in its filter, and ``Cancel selected…``
for queued rows, asked first in the message bar, carried out through the bridge."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine import NotificationState
from testkit.ui import OFFSCREEN_NOISE, console

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


def test_cancelling_selected_queued_rows_from_the_queue_view(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:  # not dispatching: the rows stay queued
        c.seed()
        assert c.window is not None
        ids = [c.run(c.engine.enqueue("globex", "sim", f"u{i}@example.com")).id for i in range(3)]
        queue = c.window.queue_view
        c.window.tabs.setCurrentWidget(queue)
        states = [queue.state.itemData(i) for i in range(queue.state.count())]
        assert NotificationState.CANCELLED.value in states
        queue.state.setCurrentIndex(states.index(NotificationState.QUEUED.value))
        c.wait(lambda: queue.model.rowCount() == 3)
        assert not queue.cancel_selected.isEnabled()  # nothing selected

        queue.table.selectRow(0)
        chosen = queue.selected_ids()
        assert len(chosen) == 1 and queue.cancel_selected.isEnabled()
        queue.cancel_selected.click()  # asks first
        assert queue.bar.isVisible()
        assert "never be sent" in queue.bar.label.text()
        assert queue.bar.reject_button.text() == "Keep them"
        queue.bar.accept_button.click()
        c.wait(lambda: queue.model.rowCount() == 2)  # no longer queued
        tenant_id = c.engine.directory.tenant_id("globex")
        assert tenant_id is not None
        gone = c.run(c.engine.store.notifications.get(tenant_id, chosen[0]))
        assert gone is not None and gone.state is NotificationState.CANCELLED
        audit = c.run(c.engine.store.audit.entries(limit=1))
        assert (audit[0].action, audit[0].actor) == ("notification.cancel", "console:test")

        queue.state.setCurrentIndex(states.index(NotificationState.CANCELLED.value))
        c.wait(lambda: queue.model.rowCount() == 1)
        assert queue.model.ids([0]) == chosen
        queue.table.selectRow(0)
        assert not queue.cancel_selected.isEnabled()  # a cancelled row cannot be
        assert sorted(set(ids) - set(chosen)) == sorted(
            v.id for v in c.run(c.engine.notifications("globex", state=NotificationState.QUEUED))
        )
        assert c.errors == []


def test_a_row_that_is_no_longer_queued_is_said_in_one_sentence(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path, window=False) as c:
        c.seed()
        first, second = (c.run(c.engine.enqueue("globex", "sim", f"u{i}@x.com")).id for i in (0, 1))
        c.run(c.engine.notification_cancel("globex", second))
        c.run(c.bridge.cancel_notifications([("globex", first), ("globex", second)]))
        assert c.errors == [
            f"notification {second} is cancelled; only a queued or scheduled notification "
            "can be cancelled."
        ]
        tenant_id = c.engine.directory.tenant_id("globex")
        assert tenant_id is not None
        done = c.run(c.engine.store.notifications.get(tenant_id, first))
        assert done is not None and done.state is NotificationState.CANCELLED
