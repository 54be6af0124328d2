"""The console's composition root and its commands: ``omnipost [console]`` and ``self-test``.

These run in child processes: a console ends by quitting its ``QApplication``, which would
stop every later Qt event loop of the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.cli import build_parser
from testkit.cli import REPO

CHILD_ENV = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "OMNIPOST_KEYS": ""}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**CHILD_ENV, "OMNIPOST_HOME": str(tmp_path / "home")}
    env.pop("OMNIPOST_KEYS")
    env.pop("OMNIPOST_DB", None)
    return env


def test_no_command_means_the_console() -> None:
    parser = build_parser()
    bare = parser.parse_args([])
    assert (bare.command, bare.gui, bare.demo) == (None, "console", False)
    demo = parser.parse_args(["console", "--demo", "--db", "sqlite:///x.db"])
    assert (demo.command, demo.gui, demo.demo, demo.db) == (
        "console",
        "console",
        True,
        "sqlite:///x.db",
    )
    test = parser.parse_args(["self-test", "--screenshot", "shot.png"])
    assert (test.gui, test.screenshot) == ("selftest", "shot.png")
    assert parser.parse_args(["migrate"]).command == "migrate"


@pytest.mark.slow
def test_self_test_passes_and_saves_a_screenshot(tmp_path: Path) -> None:
    shot = tmp_path / "console.png"
    done = subprocess.run(
        [sys.executable, "-m", "app", "self-test", "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omnipost self-test passed:"), lines
    assert "within its envelope" in lines[0]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


CLOSE_AFTER_DELIVERIES = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from PySide6.QtCore import QSettings, QTimer
    from app.session import Context
    from app.paths import Paths
    from app.console import application, run_console, run_on_qt_loop
    from app.wiring import build_store
    from engine import SecretBox
    from ui import ConsoleSettings

    folder = Path(sys.argv[1])
    box = SecretBox([SecretBox.generate_key()])
    ctx = Context(Paths(folder), f"sqlite:///{folder / 'console.db'}", box)
    app = application()
    settings = QSettings(str(folder / "console.ini"), QSettings.Format.IniFormat)
    state = {}

    def watch():
        windows = [w for w in app.topLevelWidgets() if w.objectName() == "OmniPostConsole"]
        if windows and windows[0].bridge.engine.totals().delivered >= 30:
            state["worker"] = windows[0].bridge.engine.worker_id
            windows[0].close()  # as the operator does
        else:
            QTimer.singleShot(50, watch)

    QTimer.singleShot(50, watch)
    code = run_on_qt_loop(app, run_console(app, ctx, settings, ConsoleSettings(), demo=True))

    async def check():
        async with build_store(ctx.db_url, box) as store:
            depth = await store.notifications.depth()
            workers = await store.workers.read()
        return {
            "code": code,
            "leased": sum(r.count for r in depth if r.state.value == "leased"),
            "delivered": sum(r.count for r in depth if r.state.value == "delivered"),
            "workers": {w.id: w.state for w in workers},
            "worker": state.get("worker"),
        }

    print(json.dumps(asyncio.run(check())))
    """
)


@pytest.mark.slow
def test_closing_the_window_stops_the_engine_and_returns_leases(tmp_path: Path) -> None:
    script = tmp_path / "close.py"
    script.write_text(CLOSE_AFTER_DELIVERIES)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**_env(tmp_path), "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    assert result["leased"] == 0  # every unsent lease went back to the queue
    assert result["delivered"] >= 30
    assert result["workers"][result["worker"]] == "stopped"
