"""Running the console's engine inside pytest-qt tests.

A test stays synchronous: the engine's coroutines run on a qasync loop that is installed as
the running loop for the test, and they make progress whenever Qt processes events, which is
what ``qtbot.waitUntil`` and ``qtbot.wait`` do. So a test waits with ``qtbot.waitUntil`` for
what it expects, and ``Console.run`` drives one coroutine to its end the same way. No nested
``run_until_complete``, no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QAbstractItemModel, QSettings
from PySide6.QtWidgets import QApplication
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.wiring import build_engine, build_store
from engine import Engine, Limit, SecretBox, Store
from ui import Bridge, MainWindow, new_event_loop

T = TypeVar("T")

# The offscreen platform says this of every QMainWindow (propagateSizeHints) and every raised
# window (raise); it is not a problem of ours.
OFFSCREEN_NOISE = "This plugin does not support"


def check_model(tester: ModelTester, model: QAbstractItemModel) -> None:
    """Qt's ``QAbstractItemModelTester`` over ``model`` (pytest-qt's fixture is untyped)."""
    tester.check(model)  # type: ignore[no-untyped-call]


class Console:
    """An engine on a fresh SQLite store, a bridge, and (optionally) the main window."""

    def __init__(self, qtbot: QtBot, folder: Path) -> None:
        self.qtbot = qtbot
        self.folder = folder
        self.errors: list[str] = []
        self.store: Store
        self.engine: Engine
        self.bridge: Bridge
        self.window: MainWindow | None = None

    def run(self, awaitable: Awaitable[T], timeout_ms: int = 15_000) -> T:
        """Drive ``awaitable`` to its end by processing Qt events; return its result."""
        future = asyncio.ensure_future(awaitable)
        self.qtbot.waitUntil(future.done, timeout=timeout_ms)
        return future.result()

    def wait(self, predicate: Callable[[], object], timeout_ms: int = 15_000) -> None:
        self.qtbot.waitUntil(lambda: bool(predicate()), timeout=timeout_ms)

    def settings(self) -> QSettings:
        return QSettings(str(self.folder / "console.ini"), QSettings.Format.IniFormat)

    def open(self, *, concurrency: int = 16, window: bool = True, interval_ms: int = 100) -> None:
        box = SecretBox([SecretBox.generate_key()])
        self.store = build_store(f"sqlite:///{self.folder / 'console.db'}", box)
        self.run(self.store.migrate())
        self.engine = build_engine(self.store, concurrency=concurrency, actor="console:test")
        self.run(self.engine.open())
        self.bridge = Bridge(self.engine, interval_ms=interval_ms, history_s=60)
        self.bridge.error.connect(self.errors.append)
        self.bridge.start_sampling()
        if window:
            self.window = MainWindow(self.bridge, self.settings())
            self.qtbot.addWidget(self.window)
            self.window.resize(1280, 800)
            self.window.show()

    def seed(self, provider_options: dict[str, str] | None = None) -> None:
        """Tenants acme (20/s, burst 5) and globex (unlimited), provider sim (fast)."""
        self.run(self.engine.tenant_add("acme", Limit(20, 5)))
        self.run(self.engine.tenant_add("globex"))
        options = provider_options or {"latency_ms": "1"}
        self.run(self.engine.provider_add("sim", "simulated", None, options))
        self.run(self.bridge.reload_config())

    def close(self) -> None:
        if self.window is not None:
            self.window.close()
        with contextlib.suppress(AttributeError):
            self.run(self.bridge.aclose())
        with contextlib.suppress(AttributeError):
            self.run(self.store.close())


@contextlib.contextmanager
def console(qtbot: QtBot, folder: Path, **options: Any) -> Iterator[Console]:
    """A ``Console`` on its own qasync loop; everything is stopped and closed afterwards."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    loop = new_event_loop(app)
    asyncio._set_running_loop(loop)
    harness = Console(qtbot, folder)
    try:
        harness.open(**options)
        yield harness
    finally:
        try:
            harness.close()
        finally:
            leftover = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftover:
                task.cancel()
            if leftover:
                qtbot.waitUntil(lambda: all(t.done() for t in leftover), timeout=5000)
            asyncio._set_running_loop(None)
            loop.close()
