"""The console's Qt models, each checked by Qt's ``QAbstractItemModelTester``."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest
from PySide6.QtCore import QModelIndex, QObject, Qt, Signal
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from engine import (
    BucketKey,
    BucketLevel,
    Limit,
    NotificationState,
    NotificationView,
    ProviderRecord,
    TenantDepth,
    TenantRecord,
    WorkerRecord,
)
from engine.core.present import MASKED_VALUE as MASKED  # the CLI's and the console's mask
from testkit.ui import check_model
from ui.log_model import LogFilter, LogModel
from ui.models import SORT_ROLE, ProvidersModel, TenantsModel, WorkersModel
from ui.queue_models import DepthModel, NotificationsModel
from ui.state import LogEntry, LogKind, QueueRow

ACME = TenantRecord(1, "acme", Limit(50, 20), True)
GLOBEX = TenantRecord(2, "globex", None, True)


def _text(model: TenantsModel | ProvidersModel, row: int, column: int) -> str:
    return str(model.data(model.index(row, column)))


def test_tenants_model(qtmodeltester: ModelTester) -> None:
    model = TenantsModel()
    model.set_tenants([GLOBEX, ACME])
    check_model(qtmodeltester, model)
    assert [_text(model, r, 0) for r in range(2)] == ["acme", "globex"]
    assert _text(model, 0, TenantsModel.RATE) == "50/s"
    assert _text(model, 1, TenantsModel.RATE) == "unlimited"
    level = BucketLevel(BucketKey.for_tenant("acme"), 7.25, 20, 50)
    model.set_live([level], [TenantDepth("acme", 12, 3, 40, 1, 2.5)])
    assert _text(model, 0, 4) == "7.2"
    assert _text(model, 0, 5) == "12"
    assert _text(model, 0, 7) == "2.5 s"
    check = model.data(model.index(0, TenantsModel.ENABLED), Qt.ItemDataRole.CheckStateRole)
    assert check == Qt.CheckState.Checked
    check_model(qtmodeltester, model)


def test_tenants_model_edits_ask_and_show_pending(qtbot: QtBot) -> None:
    model = TenantsModel()
    model.set_tenants([ACME, GLOBEX])
    asked: list[tuple[str, object]] = []
    model.limit_edited.connect(lambda name, limit: asked.append((name, limit)))
    rate = model.index(0, TenantsModel.RATE)
    assert model.flags(rate) & Qt.ItemFlag.ItemIsEditable
    assert model.data(rate, Qt.ItemDataRole.EditRole) == "50"
    assert model.setData(rate, "600/min")
    assert asked == [("acme", Limit(10, 20))]
    assert model.data(rate, Qt.ItemDataRole.FontRole).italic()  # pending until the store says
    assert _text(model, 0, TenantsModel.RATE) == "10/s"
    assert not model.setData(model.index(0, TenantsModel.BURST), "0.5")  # refused, not asked
    assert model.setData(model.index(1, TenantsModel.RATE), "5")  # unlimited -> 5/s burst 5
    assert asked[-1] == ("globex", Limit(5, 5))
    assert model.setData(model.index(1, TenantsModel.BURST), "9")  # on top of the pending one
    assert asked[-1] == ("globex", Limit(5, 9))
    model.set_tenants([TenantRecord(1, "acme", Limit(10, 20), True), GLOBEX])
    assert model.data(rate, Qt.ItemDataRole.FontRole) is None
    assert not model.setData(model.index(1, TenantsModel.BURST), "9")  # unlimited: no burst
    with qtbot.waitSignal(model.enabled_edited) as blocker:
        model.setData(
            model.index(0, TenantsModel.ENABLED),
            Qt.CheckState.Unchecked.value,
            Qt.ItemDataRole.CheckStateRole,
        )
    assert blocker.args == ["acme", False]


def test_set_rows_keeps_rows_when_the_same_records_return(qtbot: QtBot) -> None:
    model = TenantsModel()
    model.set_tenants([ACME, GLOBEX])
    with qtbot.assertNotEmitted(model.modelReset):
        model.set_tenants([TenantRecord(1, "acme", Limit(60, 20), True), GLOBEX])
    with qtbot.waitSignal(model.modelReset):
        model.set_tenants([ACME])


def test_providers_model_masks_secrets(qtmodeltester: ModelTester) -> None:
    model = ProvidersModel()
    record = ProviderRecord(
        1, "hook", "webhook", Limit(5, 5), {"url": "https://x.example"}, ("signing_key",),
        {"signing_key": "s3cret"},
    )  # fmt: skip
    model.set_rows([record])
    check_model(qtmodeltester, model)
    cells = [str(model.data(model.index(0, c))) for c in range(model.columnCount())]
    assert cells == ["hook", "webhook", "5/s burst 5", "closed", "url=https://x.example",
                     f"signing_key={MASKED}"]  # fmt: skip
    assert not any("s3cret" in c for c in cells)


def test_workers_model_marks_its_own(qtmodeltester: ModelTester) -> None:
    now = time.time()
    own = WorkerRecord("me-1", "host", 10, now - 60, now - 1, "running", 16, 1234)
    other = WorkerRecord("w-2", "box", 11, now - 5, now - 2, "paused", 8, 5)
    model = WorkersModel("me-1")
    model.set_rows([own, other])
    check_model(qtmodeltester, model)
    assert model.data(model.index(0, 0), Qt.ItemDataRole.FontRole).bold()
    assert model.data(model.index(1, 0), Qt.ItemDataRole.FontRole) is None
    assert model.data(model.index(0, 5)) == "1.2k"
    assert model.data(model.index(0, 2), SORT_ROLE) == 10


def test_depth_model(qtmodeltester: ModelTester) -> None:
    model = DepthModel()
    model.set_rows(
        [
            TenantDepth("acme", 5, 1, 10, 0, None, scheduled=4),
            TenantDepth("b", 0, 0, 0, 2, 61.0, cancelled=3, expired=7),
        ]
    )
    check_model(qtmodeltester, model)
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(9)]
    assert headers[2] == "Scheduled" and headers[6:8] == ["Cancelled", "Expired"]
    assert [model.data(model.index(r, 2)) for r in (0, 1)] == ["4", "0"]
    assert [model.data(model.index(r, 6)) for r in (0, 1)] == ["0", "3"]
    assert [model.data(model.index(r, 7)) for r in (0, 1)] == ["0", "7"]
    assert model.data(model.index(0, 8)) == "—"
    assert model.data(model.index(1, 8)) == "1 min 1 s"


def _view(nid: int, state: NotificationState, error: str | None = None) -> NotificationView:
    now = time.time()
    return NotificationView(
        nid, 1, 1, "+1***67", {}, f"k{nid}", 0, state, 5, 5, 5, now, now - 30, now, error
    )


def test_notifications_model(qtmodeltester: ModelTester) -> None:
    model = NotificationsModel()
    rows = [
        QueueRow("acme", "sms", _view(9, NotificationState.DEAD, "bad number\nmore")),
        QueueRow("acme", "sms", _view(3, NotificationState.QUEUED)),
    ]
    model.set_rows(rows)
    check_model(qtmodeltester, model)
    assert model.data(model.index(0, 3)) == "+1***67"
    assert model.data(model.index(0, 7)) == "bad number"
    assert model.data(model.index(0, 7), Qt.ItemDataRole.ToolTipRole) == "bad number\nmore"
    assert model.ids([1, 0, 7]) == [3, 9]


def test_log_model_is_bounded_and_newest_first(qtmodeltester: ModelTester) -> None:
    model = LogModel(capacity=3)
    check_model(qtmodeltester, model)
    model.add([LogEntry(float(i), LogKind.DELIVERY, "acme", f"#{i}") for i in range(5)])
    assert [model.data(model.index(r, 3)) for r in range(model.rowCount())] == ["#4", "#3", "#2"]
    model.add([LogEntry(9.0, LogKind.ERROR, "", "boom")])
    assert model.rowCount() == 3
    assert model.data(model.index(0, 3)) == "boom"
    assert model.data(model.index(0, 0), Qt.ItemDataRole.ForegroundRole) is not None
    assert model.rowCount(model.index(0, 0)) == 0


@pytest.mark.parametrize(
    ("kinds", "text", "shown"),
    [
        ({LogKind.DELIVERY, LogKind.ERROR, LogKind.AUDIT}, "", 3),
        ({LogKind.ERROR}, "", 1),
        ({LogKind.DELIVERY, LogKind.AUDIT}, "acme", 1),
        (set(), "", 0),
    ],
)
def test_log_filter(qtmodeltester: ModelTester, kinds: set[LogKind], text: str, shown: int) -> None:
    model = LogModel()
    model.add(
        [
            LogEntry(1.0, LogKind.DELIVERY, "acme", "#1 delivered"),
            LogEntry(2.0, LogKind.ERROR, "globex", "#2 dead"),
            LogEntry(3.0, LogKind.AUDIT, "", "cli tenant.set globex"),
        ]
    )
    proxy = LogFilter()
    proxy.setSourceModel(model)
    proxy.set_kinds(kinds)
    proxy.setFilterFixedString(text)
    check_model(qtmodeltester, proxy)
    assert proxy.rowCount(QModelIndex()) == shown


class _Pinger(QObject):
    ping = Signal()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None and True are immortal from 3.12")
def test_pyside_keeps_none_and_true_counted() -> None:
    """PySide6-Essentials 6.12.0 gives back ``True`` from every ``emit()`` and drops ``None``
    returned by every Python slot without holding a reference to either, so a console that
    runs for a while aborts with "deallocating None" on Python 3.11. pyproject.toml keeps
    that release out; this fails (rather than crashes, at 20,000 emits) if it comes back."""
    pinger = _Pinger()
    pinger.ping.connect(lambda: None)
    before = sys.getrefcount(True), sys.getrefcount(None)
    for _ in range(20_000):
        pinger.ping.emit()
    after = sys.getrefcount(True), sys.getrefcount(None)
    assert after[0] - before[0] > -100 and after[1] - before[1] > -100, (before, after)


def test_the_queue_shows_a_send_time_and_a_deadline() -> None:
    from ui.queue_models import _lifetime

    now = 1_800_000_000.0
    view = NotificationView(
        1, 1, 1, "+1***67", {}, "k", 0, NotificationState.SCHEDULED, 0, 0, 5,
        now + 7500, now, None, None, expires_at=now + 7800,
    )  # fmt: skip
    assert _lifetime(view, now) == "sends in 2 h 5 min; expires in 2 h 10 min"
    expired = dataclasses.replace(view, state=NotificationState.EXPIRED, expires_at=now - 1)
    assert _lifetime(expired, now) == "deadline passed"
    plain = dataclasses.replace(view, state=NotificationState.QUEUED, expires_at=None)
    assert _lifetime(plain, now) == ""
