"""The store and retention view against a real engine on a temporary SQLite store."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from engine import (
    DEFAULT_RETENTION,
    NotificationState,
    PruneReport,
    Retention,
    StoreSize,
    format_age,
    parse_age,
)
from testkit.ui import OFFSCREEN_NOISE, Console, console
from ui.fmt import fmt_bytes
from ui.views.store import StoreView, prune_summary

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)

DAY_S = 86400.0


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (296_653, "289.7 KiB"),
        (5 * 1024**2 + 1, "5.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
        (5000 * 1024**4, "5000.0 TiB"),
    ],
)
def test_fmt_bytes(n: int, text: str) -> None:
    assert fmt_bytes(n) == text


@pytest.mark.parametrize(
    ("report", "text"),
    [
        (PruneReport(), "Nothing was old enough to delete."),
        (
            PruneReport(3, 0, 1200, 1, freed_bytes=8192),
            "Deleted 3 delivered, 0 dead, 0 cancelled, 1,200 delivery-log and 1 audit rows; "
            "8.0 KiB given back to the disk.",
        ),
        (
            PruneReport(0, 2, dry_run=True),
            "Would delete 0 delivered, 2 dead, 0 cancelled, 0 delivery-log and 0 audit rows.",
        ),
        (
            PruneReport(1000, complete=False),
            "Deleted 1,000 delivered, 0 dead, 0 cancelled, 0 delivery-log and 0 audit rows; "
            "0 B given back to the disk (stopped at its time budget: the next pass goes on).",
        ),
        (
            PruneReport(cancelled=4, dry_run=True),
            "Would delete 0 delivered, 0 dead, 4 cancelled, 0 delivery-log and 0 audit rows.",
        ),
    ],
)
def test_prune_summary(report: PruneReport, text: str) -> None:
    assert prune_summary(report) == text


@pytest.fixture
def harness(qtbot: QtBot, tmp_path: Path) -> Iterator[Console]:
    with console(qtbot, tmp_path) as c:
        yield c


def open_view(c: Console) -> StoreView:
    """Switch to the store tab and wait until it shows the store's windows."""
    assert c.window is not None
    view = c.window.store_view
    c.window.tabs.setCurrentWidget(view)
    c.wait(view.edits["delivered_s"].isEnabled)
    return view


def retype(c: Console, view: StoreView, window: str, text: str) -> None:
    edit = view.edits[window]
    edit.clear()
    QTest.keyClicks(edit, text)


def audited(c: Console) -> list[tuple[str, dict[str, Any]]]:
    """The retention changes in the audit log: (actor, detail), newest first."""
    entries = c.run(c.engine.store.audit.entries())
    return [(e.actor, e.detail) for e in entries if e.action == "retention.set"]


def test_the_view_shows_the_defaults_and_the_size(harness: Console) -> None:
    c = harness
    view = open_view(c)
    names = ("delivered_s", "dead_s", "log_s", "audit_s", "suppressions_s")
    texts = [view.edits[name].text() for name in names]
    assert [parse_age(t) for t in texts] == [
        parse_age(t) for t in ("7d", "30d", "7d", "90d", "365d")
    ]
    assert texts == [format_age(s) for s in DEFAULT_RETENTION.as_dict().values()]
    c.wait(lambda: view.size_on_disk.text() != "…")
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB|TiB)", view.size_on_disk.text())
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB|TiB)", view.free_space.text())
    assert view.kept.text() == "0"
    assert view.last_pruned.text() == "never"
    assert "console.db" in view.store_url.text()
    assert "never deleted" in view.never_deleted.text()
    assert "idempotency key" in view.never_deleted.text()
    assert not view.apply_button.isEnabled() and not view.revert_button.isEnabled()
    assert c.errors == []


def test_an_age_typed_and_applied_changes_the_store_and_is_audited(harness: Console) -> None:
    c = harness
    view = open_view(c)
    retype(c, view, "delivered_s", "12h")
    assert view.apply_button.isEnabled() and view.revert_button.isEnabled()
    view.apply_button.click()
    c.wait(lambda: c.run(c.engine.retention()).delivered_s == 12 * 3600)
    assert c.run(c.engine.retention()) == DEFAULT_RETENTION.changed(delivered_s=12 * 3600)
    c.wait(lambda: not view.apply_button.isEnabled())
    assert view.edits["delivered_s"].text() == "12h"
    [(actor, detail)] = audited(c)
    assert actor == "console:test" and detail["delivered_s"] == 12 * 3600

    retype(c, view, "audit_s", "0")  # keep forever, applied with Return
    QTest.keyClick(view.edits["audit_s"], Qt.Key.Key_Return)
    c.wait(lambda: c.run(c.engine.retention()).audit_s is None)
    c.wait(lambda: view.edits["audit_s"].text() == "forever")
    assert c.run(c.engine.retention()).delivered_s == 12 * 3600
    assert len(audited(c)) == 2
    assert c.errors == []


@pytest.mark.parametrize("text", ["-1d", "7 parsecs", "nan", ""])
def test_a_bad_age_is_shown_in_place_and_nothing_is_written(harness: Console, text: str) -> None:
    c = harness
    view = open_view(c)
    retype(c, view, "delivered_s", "12h")  # a good edit does not make a bad one applicable
    retype(c, view, "dead_s", text)
    note = view.notes["dead_s"]
    assert "not valid" in note.text() and "d64545" in note.styleSheet()
    assert view.edits["dead_s"].problem == note.text()
    assert not view.apply_button.isEnabled()
    assert view.revert_button.isEnabled()
    view.apply_button.click()  # disabled: nothing happens
    QTest.keyClick(view.edits["dead_s"], Qt.Key.Key_Return)
    view.apply()  # called anyway: one sentence for the operator, nothing sent
    c.wait(lambda: c.errors)
    assert "not valid" in c.errors[-1]
    assert c.window is not None and c.window.bar.isVisible()
    c.run(c.bridge.load_store())
    assert c.run(c.engine.retention()) == DEFAULT_RETENTION
    assert audited(c) == []

    view.revert_button.click()
    assert view.edits["dead_s"].text() == format_age(DEFAULT_RETENTION.dead_s)
    assert view.notes["dead_s"].styleSheet() == ""
    assert not view.apply_button.isEnabled() and not view.revert_button.isEnabled()


def test_the_engine_refusing_a_window_is_a_visible_sentence(harness: Console) -> None:
    c = harness
    open_view(c)
    c.run(c.bridge.retention_set({"delivered_s": -5.0}))
    assert len(c.errors) == 1 and "positive age" in c.errors[0]
    assert c.window is not None and c.window.bar.isVisible()
    assert c.run(c.engine.retention()) == DEFAULT_RETENTION


def test_a_change_from_elsewhere_keeps_an_edit_under_way(harness: Console) -> None:
    c = harness
    view = open_view(c)
    retype(c, view, "dead_s", "45d")
    c.run(c.engine.retention_set(delivered_s=3600.0))  # another console, say
    c.run(c.bridge.load_store())
    assert view.edits["delivered_s"].text() == "1h"
    assert view.edits["dead_s"].text() == "45d"
    assert view.apply_button.isEnabled()


def finish_some(c: Console) -> None:
    """Six delivered and two dead notifications, then one left queued: the engine stops."""
    c.seed()
    c.run(c.engine.provider_add("dud", "simulated", None, {"permanent_rate": "1"}))
    for i in range(6):
        c.run(c.engine.enqueue("acme", "sim", f"u{i}@example.com"))
    for i in range(2):
        c.run(c.engine.enqueue("globex", "dud", f"d{i}@example.com"))
    c.run(c.engine.start())
    c.wait(
        lambda: (c.engine.telemetry.totals().delivered, c.engine.telemetry.totals().dead) == (6, 2)
    )
    c.run(c.bridge.stop_engine())
    c.run(c.engine.enqueue("acme", "sim", "late@example.com", key="kept"))


def age_everything(db_url: str) -> dict[str, int]:
    """Make every finished row and log entry older than its default window; returns how many
    rows of each kind were aged."""
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            aged = {
                "finished": conn.execute(
                    sa.text(
                        "UPDATE notifications SET finished_at = finished_at - :s, "
                        "enqueued_at = enqueued_at - :s"
                    ),
                    {"s": 40 * DAY_S},
                ).rowcount,
                "delivery_log": conn.execute(
                    sa.text("UPDATE delivery_log SET ts = ts - :s"), {"s": 40 * DAY_S}
                ).rowcount,
                "audit_log": conn.execute(
                    sa.text("UPDATE audit_log SET ts = ts - :s"), {"s": 100 * DAY_S}
                ).rowcount,
            }
    finally:
        engine.dispose()
    return aged


def count_rows(db_url: str, older_than_s: float = 0.0) -> dict[str, int]:
    """Rows per table; with ``older_than_s``, only log entries at least that old."""
    queries = {
        "notifications": "SELECT count(*) FROM notifications",
        "delivery_log": "SELECT count(*) FROM delivery_log WHERE ts <= :cut",
        "audit_log": "SELECT count(*) FROM audit_log WHERE ts <= :cut",
    }
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            cut = {"cut": time.time() - older_than_s}
            return {t: int(conn.execute(sa.text(q), cut).scalar_one()) for t, q in queries.items()}
    finally:
        engine.dispose()


def test_prune_now_deletes_old_finished_rows_and_shows_the_counts(
    harness: Console, tmp_path: Path
) -> None:
    c = harness
    db_url = f"sqlite:///{tmp_path / 'console.db'}"
    finish_some(c)
    view = open_view(c)
    c.wait(lambda: view.kept.text() == "9")
    aged = age_everything(db_url)
    assert aged["finished"] == 9 and aged["delivery_log"] >= 8 and aged["audit_log"] >= 4

    view.prune_button.click()
    assert not view.prune_button.isEnabled()
    c.wait(lambda: view.prune_result.isVisible() and view.prune_button.isEnabled())
    text = view.prune_result.text()
    assert text.startswith(
        f"Deleted 6 delivered, 2 dead, 0 cancelled, {aged['delivery_log']:,} delivery-log and "
        f"{aged['audit_log']:,} audit rows; "
    )
    assert re.search(r"\d+(\.\d)? (B|KiB|MiB) given back to the disk\.$", text)
    left = count_rows(db_url, older_than_s=DAY_S)
    assert left == {"notifications": 1, "delivery_log": 0, "audit_log": 0}
    kept = c.run(c.engine.notifications("acme"))
    assert [(n.state, n.idempotency_key) for n in kept] == [(NotificationState.QUEUED, "kept")]
    c.wait(lambda: view.kept.text() == "1")
    assert view.last_pruned.text() != "never"
    assert c.errors == []


@pytest.mark.slow
def test_the_store_is_read_on_a_slow_cadence_not_every_tick(
    harness: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = harness
    calls: list[StoreSize] = []
    real = c.engine.store_size

    async def counted() -> StoreSize:
        size = await real()
        calls.append(size)
        return size

    monkeypatch.setattr(c.engine, "store_size", counted)
    c.wait(lambda: len(c.bridge.history) >= 2)
    before = len(calls)
    samples = len(c.bridge.history)
    c.wait(lambda: len(c.bridge.history) >= samples + 10)  # a second of 100 ms ticks
    assert len(calls) == before
    open_view(c)  # opening the view reads it at once
    c.wait(lambda: len(calls) == before + 1)
    assert isinstance(c.run(c.engine.retention()), Retention)
