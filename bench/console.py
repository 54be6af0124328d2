"""Is the console smooth while its own engine works hard? Prints JSON.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/console.py [--per-tenant 1000] [--idle-s 5]

On a temporary SQLite store: 16 tenants (100/s, burst 100 each), two providers (1000/s each)
and two pair limits: 20 buckets. The console's window is open on the dashboard with the
default refresh (500 ms). Measured:

- idle: CPU used by the process while the window is open and the engine runs with no work;
- load: while the engine drains ``16 * per_tenant`` notifications (>= 1,000/s): the event
  loop's lag (how late a 10 ms sleep wakes, p50/p99/max), the time of one dashboard refresh
  (the synchronous redraw from a snapshot, p50/p99/max), and the delivery rate reached.

With ``--deep N`` the same runs twice, side by side: on an empty store and on a deep one that
also holds N delivered notifications of a month of history (with their delivery-log rows) and
N queued for a tenant limited to 1/s (bulk-inserted in SQL after ``migrate``, then
``ANALYZE``), as a console open on a store that has run for months. The loop lag there must be
no worse than on the empty store.

With ``--tenants N`` (10,000 in ``make bench``): the console over N tenants with a pair limit
each, dispatching across all of them: the window's time to show, the loop lag while
dispatching, RSS per tenant, one sort and one filter of the 10,000-row table
(``bench/_console_many.py`` says how)::

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/console.py --tenants 10000 [--seconds 20]
        [--queued 6] [--shots /tmp/shots]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from _console_many import bench_tenants
from deep_store import insert_history
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QSettings
from scale_queue import bulk_insert

from app.console import application, run_on_qt_loop
from app.wiring import build_engine, build_store
from engine import Engine, EnqueueItem, Limit, SecretBox
from ui import Bridge, MainWindow, hush_offscreen_noise

TENANTS = [f"t{i:02d}" for i in range(16)]
PROVIDERS = ("fast-a", "fast-b")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def _summary_ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50_ms": round(_pct(values, 50) * 1000, 2),
        "p99_ms": round(_pct(values, 99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
        "samples": len(values),
    }


async def _lag_probe(lags: list[float], period_s: float = 0.01) -> None:
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(period_s)
        lags.append(max(0.0, loop.time() - before - period_s))


async def _setup(engine: Engine) -> None:
    for name in TENANTS:
        await engine.tenant_add(name, Limit(100, 100))
    for name in PROVIDERS:
        await engine.provider_add(name, "simulated", Limit(1000, 500), {"latency_ms": "1"})
    await engine.pair_limit_set(TENANTS[0], PROVIDERS[0], Limit(200, 100))
    await engine.pair_limit_set(TENANTS[1], PROVIDERS[1], Limit(200, 100))


async def _deepen(engine: Engine, url: str, box: SecretBox, rows: int) -> dict[str, float]:
    """A month of ``rows`` delivered notifications and ``rows`` queued behind a 1/s tenant."""
    history = await engine.tenant_add("history")
    backlog = await engine.tenant_add("backlog", Limit(1.0, 1.0))
    provider_id = engine.directory.provider_id(PROVIDERS[0]) or 0
    token = box.encrypt("customer@example.com")
    history_s = await insert_history(url, history.id, provider_id, token, rows)
    backlog_s = await bulk_insert(url, backlog.id, provider_id, token, rows, analyze_sqlite=True)
    return {"history_insert_s": round(history_s, 1), "backlog_insert_s": round(backlog_s, 1)}


async def _drained(engine: Engine, target: int, timeout_s: float) -> bool:
    """Wait until the engine has delivered ``target`` in all (the backlog of a deep store
    never empties, so ``run_until_empty`` cannot tell)."""
    deadline = time.perf_counter() + timeout_s
    while engine.telemetry.totals().delivered < target:
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def bench(
    per_tenant: int, idle_s: float, concurrency: int, ui: str = "window", deep: int = 0
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="omnipost-bench-") as tmp:
        folder = Path(tmp)
        box = SecretBox([SecretBox.generate_key()])
        url = f"sqlite:///{folder / 'bench.db'}"
        async with build_store(url, box) as store:
            await store.migrate()
            engine = build_engine(store, concurrency=concurrency, actor="console:bench")
            await engine.open()
            await _setup(engine)
            inserted = await _deepen(engine, url, box, deep) if deep else {}
            bridge = Bridge(engine)  # the default refresh: 500 ms, 5 min of history
            window = MainWindow(
                bridge, QSettings(str(folder / "c.ini"), QSettings.Format.IniFormat)
            )
            window.resize(1440, 900)
            if ui == "window":
                window.show()
            if ui != "none":
                bridge.start_sampling()
            await bridge.start()
            await asyncio.sleep(1.0)  # settle: first samples, config read

            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(idle_s)
            idle_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)

            target = engine.telemetry.totals().delivered + per_tenant * len(TENANTS)
            for i, name in enumerate(TENANTS):
                provider = PROVIDERS[i % 2]
                for start in range(0, per_tenant, 500):
                    items = [
                        EnqueueItem(provider, f"u{n}@{name}.example", {"n": n}, f"b-{n}", 0)
                        for n in range(start, min(per_tenant, start + 500))
                    ]
                    await engine.enqueue_many(name, items)
            lags: list[float] = []
            refreshes: list[float] = []
            bridge.sampled.connect(lambda _snap: refreshes.append(window.dashboard.last_refresh_s))
            probe = asyncio.ensure_future(_lag_probe(lags))
            delivered0 = engine.telemetry.totals().delivered
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            drained = await _drained(engine, target, timeout_s=120)
            elapsed = time.perf_counter() - t0
            load_cpu = (time.process_time() - cpu0) / elapsed
            delivered = engine.telemetry.totals().delivered - delivered0
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            buckets = len((await engine.snapshot()).buckets)
            await bridge.aclose()
            window.close()
    return {
        "benchmark": "console",
        "python": platform.python_version(),
        "pyside6": pyside_version,
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),  # other work on the machine
        "buckets": buckets,
        "ui": ui,
        "deep_rows": deep,
        **inserted,
        "refresh_ms": 500,
        "idle": {"seconds": idle_s, "cpu_percent": round(idle_cpu * 100, 1)},
        "load": {
            "notifications": per_tenant * len(TENANTS),
            "drained": drained,
            "seconds": round(elapsed, 2),
            "delivered_per_s": round(delivered / elapsed, 1),
            "cpu_percent": round(load_cpu * 100, 1),
            "loop_lag": _summary_ms(lags),
            "dashboard_refresh": _summary_ms(refreshes),
            "mean_refresh_ms": round(statistics.fmean(refreshes) * 1000, 2) if refreshes else None,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-tenant", type=int, default=1000)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--deep",
        type=int,
        default=0,
        help="also run on a store with this many finished and this many queued rows",
    )
    parser.add_argument(
        "--ui",
        choices=("window", "bridge", "none"),
        default="window",
        help="window: the console as used; bridge: sampling without a window; none: engine only",
    )
    parser.add_argument("--tenants", type=int, default=0, help="the console over N tenants")
    parser.add_argument("--seconds", type=float, default=20.0, help="with --tenants: dispatch")
    parser.add_argument("--queued", type=int, default=6, help="with --tenants: per tenant")
    parser.add_argument("--shots", type=Path, default=None, help="with --tenants: PNGs here")
    parser.add_argument(
        "--no-pair-limits", action="store_true", help="with --tenants: tenant limits only"
    )
    args = parser.parse_args()
    hush_offscreen_noise()
    app = application(sys.argv[:1])
    result: dict[str, object] = {}

    async def run() -> int:
        if args.tenants:
            many = await bench_tenants(
                args.tenants,
                seconds=args.seconds,
                queued=args.queued,
                concurrency=args.concurrency,
                shots=args.shots,
                pair_limits=not args.no_pair_limits,
            )
            result.update(many)
            return 0
        empty = await bench(args.per_tenant, args.idle_s, args.concurrency, args.ui)
        if not args.deep:
            result.update(empty)
            return 0
        deep = await bench(args.per_tenant, args.idle_s, args.concurrency, args.ui, args.deep)
        result.update(
            benchmark="console", empty=empty, deep=deep, deep_vs_empty=_compare(empty, deep)
        )
        return 0

    run_on_qt_loop(app, run())
    print(json.dumps(result, indent=2))
    return 0


def _compare(empty: dict[str, Any], deep: dict[str, Any]) -> dict[str, float | None]:
    """deep / empty for the figures the console's smoothness is judged by."""

    def ratio(path: tuple[str, ...]) -> float | None:
        a: Any = empty
        b: Any = deep
        for key in path:
            a, b = a.get(key) if a else None, b.get(key) if b else None
        return round(b / a, 2) if a and b else None

    return {
        "loop_lag_p99": ratio(("load", "loop_lag", "p99_ms")),
        "loop_lag_p50": ratio(("load", "loop_lag", "p50_ms")),
        "dashboard_refresh_p99": ratio(("load", "dashboard_refresh", "p99_ms")),
        "delivered_per_s": ratio(("load", "delivered_per_s")),
        "idle_cpu": ratio(("idle", "cpu_percent")),
    }


if __name__ == "__main__":
    sys.exit(main())
