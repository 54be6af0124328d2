"""``omnipost self-test [--screenshot PATH]``: the console, offscreen, proves itself.

On a temporary SQLite store it sets up three tenants (two limited, one not) and a ``file``
provider with a limit of its own, builds the console's bridge and main window, starts
dispatching and a spike burst through the window's own commands, and waits for the queue to
drain. Then it reads the provider's file: every notification must be there, and no tenant and
not the provider may exceed its envelope (``burst + rate * W + 1`` in any window of ``W``
seconds, docs/architecture.md). Prints one line and exits 0 when all of that holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from app.session import Context
from app.wiring import build_engine, build_store
from engine import Limit, OmniPostError, SecretBox, worst_window

__all__ = ["check_envelope", "main", "self_test"]

TENANTS = {"acme": Limit(40, 10), "globex": Limit(15, 5), "initech": None}
PROVIDER = ("file-out", Limit(60, 20))
COUNT = 60  # per tenant: about 4 s at globex's 15/s
WINDOWS_S = (0.5, 1.0, 2.0, 5.0)
TIMEOUT_S = 60.0


def check_envelope(timestamps: Sequence[float], limit: Limit, name: str) -> str | None:
    """None when no window of ``WINDOWS_S`` holds more than the bucket allows, else why."""
    for window_s in WINDOWS_S:
        worst = worst_window(timestamps, window_s, limit.rate_per_s, limit.burst)
        if not worst.holds:
            return (
                f"{name} sent {worst.count:g} in {window_s:g} s; "
                f"{limit.rate_per_s:g}/s with burst {limit.burst:g} allows {worst.allowed:g}"
            )
    return None


def _verdict(lines: list[dict[str, object]], expected: int) -> tuple[bool, str]:
    ids = {line["notification_id"] for line in lines}
    if len(ids) != expected:
        return False, f"{len(ids)} of {expected} notifications were delivered"
    problems = [
        check_envelope([float(str(x["ts"])) for x in lines if x["tenant"] == name], limit, name)
        for name, limit in TENANTS.items()
        if limit is not None
    ]
    name, limit = PROVIDER
    problems.append(check_envelope([float(str(x["ts"])) for x in lines], limit, name))
    found = [p for p in problems if p]
    if found:
        return False, found[0]
    span = max(float(str(x["ts"])) for x in lines) - min(float(str(x["ts"])) for x in lines)
    return True, (
        f"{expected} notifications of {len(TENANTS)} tenants delivered in {span:.1f} s, "
        "every bucket within its envelope"
    )


async def self_test(folder: Path, screenshot: Path | None) -> tuple[bool, str]:
    """Run the burst in ``folder``; returns (passed, one sentence)."""
    from PySide6.QtCore import QSettings

    from ui import Bridge, MainWindow

    out = folder / "deliveries.jsonl"
    box = SecretBox([SecretBox.generate_key()])
    async with build_store(f"sqlite:///{folder / 'self-test.db'}", box) as store:
        await store.migrate()
        engine = build_engine(store, concurrency=32, actor="console:self-test")
        await engine.open()
        for name, limit in TENANTS.items():
            await engine.tenant_add(name, limit)
        await engine.provider_add(PROVIDER[0], "file", PROVIDER[1], {"path": str(out)})
        bridge = Bridge(engine, interval_ms=200, history_s=60)
        errors: list[str] = []
        bridge.error.connect(errors.append)
        settings = QSettings(str(folder / "console.ini"), QSettings.Format.IniFormat)
        window = MainWindow(bridge, settings)
        window.resize(1400, 900)
        window.show()
        try:
            bridge.start_sampling()
            await bridge.start()
            await bridge.simulate(list(TENANTS), PROVIDER[0], COUNT)
            deadline = time.monotonic() + TIMEOUT_S
            while (sim := bridge.simulation) is None or not sim.done:
                if errors or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.6)  # a few more samples, so the plots show the tail
            if screenshot is not None and not window.grab().save(str(screenshot)):
                errors.append(f"cannot save the screenshot to {screenshot}")
        finally:
            await bridge.aclose()
            window.close()
    if errors:
        return False, errors[0]
    if sim is None or sim.actual_s is None:
        return False, f"the burst did not drain within {TIMEOUT_S:g} s"
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return _verdict(lines, COUNT * len(TENANTS))


def main(args: argparse.Namespace, ctx: Context) -> int:
    """Exit 0 when the self-test passed, 1 when it did not; one line either way."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.console import application, run_on_qt_loop
    from ui import hush_offscreen_noise

    hush_offscreen_noise()
    screenshot = Path(args.screenshot).expanduser() if args.screenshot else None
    app = application(sys.argv[:1])
    outcome: list[tuple[bool, str]] = []

    async def run() -> int:
        with tempfile.TemporaryDirectory(prefix="omnipost-self-test-") as folder:
            try:
                outcome.append(await self_test(Path(folder), screenshot))
            except OmniPostError as exc:
                outcome.append((False, exc.message))
        return 0

    run_on_qt_loop(app, run())
    passed, why = outcome[0] if outcome else (False, "the self-test did not finish")
    print(f"omnipost self-test {'passed' if passed else 'failed'}: {why}")
    return 0 if passed else 1
