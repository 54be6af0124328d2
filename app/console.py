"""``omnipost console``: the composition root of the operator's window.

One thread, one loop: the engine's coroutines and Qt share qasync's event loop. The window's
close (or the application quitting, qasync's README pattern) sets an ``asyncio.Event`` that
``run_console`` awaits; then the engine stops cleanly, returning unsent leases, before the
loop ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import logging
import sys
from collections.abc import Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.demo import DEMO_TENANTS, seed_demo
from app.metrics import METRICS_VIEW, MetricsAddress, MetricsExporter, metrics_address
from app.session import Context, actor, on_signals, store_url
from app.wiring import build_engine, build_store, loaded_frozen
from engine import Engine, Pattern
from ui import Bridge, ConsoleSettings, MainWindow, load_settings, new_event_loop

__all__ = ["application", "main", "run_console", "run_on_qt_loop"]

log = logging.getLogger(__name__)


def application(argv: Sequence[str] = ()) -> QApplication:
    """The process's ``QApplication`` (made once). Closing the last window does not quit it:
    the console quits after its engine stopped."""
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([*argv] or ["omnipost"])
    app.setOrganizationName("OmniPost")
    app.setApplicationName("OmniPost console")
    app.setQuitOnLastWindowClosed(False)
    return app


def run_on_qt_loop(app: QApplication, main_coro: Coroutine[Any, Any, int]) -> int:
    """Run ``main_coro`` on a qasync loop over ``app`` and return its result. When the
    application quit before the coroutine finished (the session ended), the loop runs on
    until it has: the engine still stops cleanly."""
    loop = new_event_loop(app)
    asyncio.set_event_loop(loop)
    task = loop.create_task(main_coro)
    try:
        try:
            return int(loop.run_until_complete(task))
        except RuntimeError:
            if task.done():
                raise
            return int(loop.run_until_complete(task))
    finally:
        loop.close()
        asyncio.set_event_loop(None)


async def run_console(
    app: QApplication,
    ctx: Context,
    settings_store: QSettings,
    settings: ConsoleSettings,
    *,
    demo: bool = False,
    redis_url: str | None = None,
    dispatch: bool | None = None,
    metrics: MetricsAddress | None = None,
    serve: int | None = None,
) -> int:
    """Open the store, show the window, open the engine (its limiter in Redis at ``redis_url``
    when given), and run until the window is closed, serving Prometheus metrics at ``metrics``
    if given (bound first: a taken port fails before anything opens). Returns 0, or 1 when the
    engine failed. With ``serve``, the HTTP API answers on 127.0.0.1 at that port meanwhile."""
    who = actor("console")
    api_metrics = _api_metrics() if serve is not None else None
    async with (
        MetricsExporter(metrics, extra=api_metrics) as exporter,
        build_store(ctx.db_url, ctx.box) as store,
    ):
        await store.migrate()

        engine = build_engine(store, actor=who, redis_url=redis_url)
        bridge = Bridge(
            engine,
            seed_demo=seed_demo,
            interval_ms=settings.refresh_ms,
            history_s=settings.history_s,
        )
        window = MainWindow(bridge, settings_store, settings)
        closed = asyncio.Event()
        window.closing.connect(closed.set)
        app.aboutToQuit.connect(closed.set)
        # The window first, greyed while the engine loads the configuration (seconds at
        # 100,000 tenants, with the loop turning between parts: the window paints meanwhile).
        window.setEnabled(False)
        window.show()
        window.statusBar().showMessage("Loading the configuration…")
        await engine.open()
        if demo:
            await seed_demo(engine)
        async with (
            exporter.following(functools.partial(engine.snapshot, view=METRICS_VIEW)),
            _api(engine, serve, api_metrics),
        ):
            # Enabled once the metrics hold a first snapshot and the API (if any) serves.
            window.setEnabled(True)
            window.statusBar().clearMessage()
            # Ctrl+C in the terminal closes cleanly too; the configuration just loaded stays
            # out of the collector's rounds meanwhile.
            with on_signals(closed.set), loaded_frozen():
                bridge.start_sampling()
                if (settings.dispatch_on_open if dispatch is None else dispatch) or demo:
                    await bridge.start()
                if demo:
                    tenants = [name for name, _ in DEMO_TENANTS]
                    bridge.simulate(tenants, "sms-sim", 400, Pattern.RAMP, 20.0)
                await closed.wait()
                window.hide()
        await bridge.aclose()
        failure = bridge.engine.failure
    if failure:
        print(f"omnipost: the engine stopped: {failure}", file=sys.stderr)
    return 1 if failure else 0


def _api_metrics() -> Any:
    from api import ApiMetrics  # the API and uvicorn: only with --serve

    return ApiMetrics()


def _api(engine: Engine, port: int | None, metrics: Any) -> AbstractAsyncContextManager[Any]:
    if port is None:
        return contextlib.nullcontext()
    from app.serve import embedded

    return embedded(engine, port, metrics=metrics)


def main(args: argparse.Namespace, ctx: Context) -> int:
    """``omnipost [console] [--demo] [--db URL] [--metrics-port PORT]``."""
    metrics = metrics_address(
        getattr(args, "metrics_port", None), getattr(args, "metrics_host", None)
    )
    app = application(sys.argv[:1])
    settings_store = QSettings("OmniPost", "Console")
    settings = load_settings(settings_store)
    if settings.store_url:  # the store the window saved, unless --db or OMNIPOST_DB names one
        flag = getattr(args, "db", None) or getattr(args, "db_top", None)
        ctx = dataclasses.replace(ctx, db_url=store_url(flag, ctx.paths, settings.store_url))
    coro = run_console(
        app,
        ctx,
        settings_store,
        settings,
        demo=bool(getattr(args, "demo", False)),
        redis_url=getattr(args, "redis", None) or settings.redis_url or None,
        dispatch=False if getattr(args, "no_dispatch", False) else None,
        metrics=metrics,
        serve=getattr(args, "serve", None),
    )
    return run_on_qt_loop(app, coro)
