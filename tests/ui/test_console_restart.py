"""The console's Stop then Start restarts the same engine: its limiter keeps the buckets' levels,
so no extra burst slips out (a new engine's local buckets would start full)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from engine import BucketKey, EngineState, Limit
from testkit.ui import OFFSCREEN_NOISE, Console, console

pytestmark = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


def acme_tokens(c: Console) -> float:
    levels = c.run(c.bridge.engine.limiter.levels())
    [level] = [lv for lv in levels if lv.key == BucketKey.for_tenant("acme")]
    return level.tokens


@pytest.mark.slow
def test_stop_then_start_keeps_the_limiter(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path, window=False) as c:
        c.seed()
        engine = c.engine
        # One token in two seconds: what the bucket holds after the restart is what it held
        # before, give or take the moment the restart took; a refilled one would hold 5.
        c.run(engine.tenant_update("acme", limit=Limit(0.5, 5)))
        for i in range(5):
            c.run(engine.enqueue("acme", "sim", f"user{i}@example.com", key=f"k{i}"))
        c.run(c.bridge.start())
        c.wait(lambda: engine.totals().delivered == 5)
        first_worker = engine.worker_id

        c.run(c.bridge.stop())
        assert engine.state is EngineState.STOPPED
        before = acme_tokens(c)
        assert before < 1.0
        c.run(c.bridge.start())

        assert c.bridge.engine is engine, "Start after Stop opened another engine"
        assert c.bridge.engine.state is EngineState.RUNNING
        assert engine.worker_id != first_worker
        assert acme_tokens(c) < before + 0.5, "Start refilled the bucket"
        c.run(engine.enqueue("acme", "sim", "late@example.com", key="late"))
        c.wait(lambda: engine.totals().delivered == 6, timeout_ms=10_000)
        assert c.errors == []
