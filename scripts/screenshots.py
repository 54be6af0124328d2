"""Render each main view of the console into ``docs/screenshots/`` for the README.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshots.py [--seconds 14] [--out DIR]
        [--only NAME ...]

Runs the demo on a temporary store: the console's own engine dispatches two bursts (a ramp
through ``sms-sim`` and a spike through the flakier ``email-sim``) while the script waits,
then captures every tab (the store after one "prune now"; the simulator once more in its
what-if mode with a plan of proposed limits), and the dashboard once more in the dark
palette. ``--only store`` writes just ``store.png``, and so on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.console import application, run_on_qt_loop
from app.demo import DEMO_TENANTS, seed_demo
from app.wiring import build_engine, build_store
from engine import BucketKey, Engine, Pattern, SecretBox
from ui import Bridge, MainWindow, hush_offscreen_noise

ROOT = Path(__file__).resolve().parents[1]
SIZE = (1440, 900)


async def settle(seconds: float = 0.4) -> None:
    """Let Qt lay out and paint by yielding to the loop (never ``processEvents`` inside a
    coroutine: it would run other tasks' steps inside this one)."""
    await asyncio.sleep(seconds)


async def plan_what_if(window: MainWindow) -> None:
    """Propose a faster ``sms-sim`` and a looser ``umbrella``, plan a ramp with both."""
    sim = window.simulator
    sim.modes.setCurrentWidget(sim.whatif)
    sim.provider.setCurrentText("sms-sim")
    sim.pattern.setCurrentIndex(sim.pattern.findData(Pattern.RAMP.value))
    sim.count.setValue(400)
    sim.duration.setValue(6)
    whatif, model = sim.whatif, sim.whatif.model
    for key, rate, burst in (
        (BucketKey.for_provider("sms-sim"), "120", "60"),
        (BucketKey.for_tenant("umbrella"), "30", ""),
    ):
        row = [r.key for r in whatif.state.rows].index(key)
        model.setData(model.index(row, model.RATE), rate)
        model.setData(model.index(row, model.BURST), burst)
    done = asyncio.Event()
    window.bridge.planned.connect(lambda _report: done.set())
    window.bridge.plan_failed.connect(lambda _sentence: done.set())
    whatif.plan_burst()
    await done.wait()
    if whatif.state.shown is None:
        raise SystemExit(f"the what-if plan failed: {whatif.message.text()}")


async def receiver() -> asyncio.Server:
    """A loopback application that takes every status event (204), for the webhooks view."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def subscribe(engine: Engine, tenant: str, port: int) -> None:
    """Two endpoints of ``tenant``: its application, and one that is down (nothing listens)."""
    url = f"http://127.0.0.1:{port}/omnipost/events"
    await engine.webhook_add(tenant, url, allow_private=True)
    down = "http://127.0.0.1:9/events"
    await engine.webhook_add(tenant, down, events=["dead", "expired"], allow_private=True)


async def tour(window: MainWindow, save: Callable[[str], Awaitable[None]]) -> None:
    """Show each view as the README pictures it and ``save`` it under its name."""
    await save("dashboard")
    window.tabs.setCurrentWidget(window.tenants_view)
    window.tenants_view.table.selectRow(0)
    await save("tenants")
    window.tabs.setCurrentWidget(window.providers_view)
    window.providers_view.table.selectRow(0)
    await save("providers")
    window.tabs.setCurrentWidget(window.simulator)
    await save("simulator")
    await plan_what_if(window)
    await save("whatif")
    window.simulator.modes.setCurrentIndex(0)
    window.tabs.setCurrentWidget(window.queue_view)
    await asyncio.sleep(0.5)
    await save("queue")
    window.tabs.setCurrentWidget(window.workers_view)
    await save("workers")
    window.tabs.setCurrentWidget(window.store_view)
    await window.bridge.prune()
    await save("store")
    window.tabs.setCurrentWidget(window.webhooks_view)
    window.webhooks_view.tenant.setText(DEMO_TENANTS[0][0])
    window.webhooks_view.reload()
    await asyncio.sleep(0.5)
    window.webhooks_view.table.selectRow(0)
    await asyncio.sleep(0.5)
    await save("webhooks")
    window.tabs.setCurrentWidget(window.dashboard)
    window.follow_system_theme(dark=True)
    await save("dashboard-dark")
    window.follow_system_theme(dark=False)


async def shoot(
    app: QApplication, out: Path, seconds: float, only: frozenset[str] = frozenset()
) -> list[Path]:
    saved: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="omnipost-shots-") as tmp:
        folder = Path(tmp)
        box = SecretBox([SecretBox.generate_key()])
        async with build_store(f"sqlite:///{folder / 'demo.db'}", box) as store:
            await store.migrate()
            engine = build_engine(store, concurrency=32, actor="console:ann@ops")
            await engine.open()
            await seed_demo(engine)
            application_server = await receiver()
            port = application_server.sockets[0].getsockname()[1]
            await subscribe(engine, DEMO_TENANTS[0][0], port)
            bridge = Bridge(engine, seed_demo=seed_demo, interval_ms=250, history_s=120)
            settings = QSettings(str(folder / "console.ini"), QSettings.Format.IniFormat)
            window = MainWindow(bridge, settings)
            window.resize(*SIZE)
            window.follow_system_theme(dark=False)
            window.show()
            bridge.start_sampling()
            await bridge.start()
            tenants = [name for name, _ in DEMO_TENANTS]
            bridge.simulate(tenants, "sms-sim", 300, Pattern.RAMP, seconds * 0.6)
            await asyncio.sleep(1.0)
            await engine.simulate(tenants[:3], "email-sim", 60)  # a second burst, for dead letters
            await asyncio.sleep(seconds)

            async def save(name: str) -> None:
                if only and name not in only:
                    return
                await settle()
                path = out / f"{name}.png"
                if not window.grab().save(str(path)):
                    raise SystemExit(f"cannot write {path}")
                saved.append(path)

            await tour(window, save)
            application_server.close()
            await bridge.aclose()
            window.close()
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=14.0, help="how long the demo runs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--only", nargs="+", default=[], help="names of the images to write")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    hush_offscreen_noise()
    app = application(sys.argv[:1])
    paths: list[Path] = []

    async def run() -> int:
        paths.extend(await shoot(app, args.out, args.seconds, frozenset(args.only)))
        return 0

    run_on_qt_loop(app, run())
    for path in paths:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
