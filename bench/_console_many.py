"""``bench/console.py --tenants N``: the console over N tenants while its engine dispatches.

On a temporary SQLite store: N tenants (2-50/s, burst one second's worth), three ``simulated``
providers (10 ms, 1,000/s each) and a pair limit for every (tenant, provider): 4N + 3 buckets
(``--no-pair-limits``: N + 3);
``--queued`` due notifications per tenant over the three providers (bulk SQL, then the count
triggers), so the engine dispatches across every tenant for the whole run. Measured:

- ``engine_alone``: the engine dispatching with no console for ``--seconds`` / 2: its loop
  lag and delivery rate, what the console's figures compare with;
- ``open_s``: opening a second engine on the populated store (the configuration read and the
  limiter configured: what the console's launch does before its window);
- ``window_s``: from making the bridge and the window to the window shown (the console's
  launch shows it greyed while its engine opens);
- ``show_s``: from making the bridge and the window to the first sample drawn in the shown
  window, while the engine dispatches (the store and the engine are open already);
- then, for ``--seconds``: the loop's lag (how late a 10 ms sleep
  wakes, p50/p99/max) with the dashboard shown, the delivery rate reached, the dashboard's
  refresh time, and the loop lag with the Tenants & limits view shown and scrolled;
- RSS: the process's resident memory before the window was made and after the run, and
  the difference per tenant;
- the Tenants & limits table, which holds a page of N: pages asked for and shown (sorted by
  rate, the last page, a search, the first page), timed, and a sort of the page shown by a live
  column;
- with ``--shots DIR``: PNGs of the dashboard, the Tenants & limits view and the queue view.
"""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QWidget

from app.wiring import build_engine, build_store, loaded_frozen
from engine import Engine, NotificationState, SecretBox, Store, TenantPage, TenantQuery
from testkit.many_tenants import populate
from ui import Bridge, MainWindow

__all__ = ["bench_tenants"]


def rss_mb() -> float:
    """The process's resident set now (MiB), from /proc."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def summary_ms(values: list[float]) -> dict[str, float]:
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


async def _lagged(seconds: float, during: Any = None) -> list[float]:
    lags: list[float] = []
    probe = asyncio.ensure_future(_lag_probe(lags))
    try:
        if during is not None:
            await during
        await asyncio.sleep(seconds)
    finally:
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)
    return lags


async def _scroll(window: MainWindow, seconds: float) -> None:
    """Page through the tenants table, as an operator would, for ``seconds``."""
    bar = window.tenants_view.table.verticalScrollBar()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        bar.setValue((bar.value() + bar.pageStep()) % max(1, bar.maximum()))
        await asyncio.sleep(0.25)


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return round((time.perf_counter() - t0) * 1000, 1)


async def _page_ms(window: MainWindow, query: TenantQuery) -> float:
    """From asking the Tenants & limits table for ``query``'s page to the page shown, in ms."""
    view = window.tenants_view
    shown = asyncio.Event()

    def arrived(page: TenantPage) -> None:
        if page.query == query:
            shown.set()

    window.bridge.tenant_page_loaded.connect(arrived)
    t0 = time.perf_counter()
    view.ask(query)
    await shown.wait()
    await asyncio.sleep(0)  # the view's slot ran (connected before ours)
    window.bridge.tenant_page_loaded.disconnect(arrived)
    return round((time.perf_counter() - t0) * 1000, 1)


async def _table_ms(window: MainWindow, tenants: int) -> dict[str, Any]:
    """Pages of the Tenants & limits table, each read from the store and shown, in ms: sorted
    by rate (as a click on its header asks), the last page by name, a search; then a sort of
    the page shown by a live column (the model sorts it)."""
    view = window.tenants_view
    page = view.query.limit
    last = (tenants - 1) // page * page
    figures: dict[str, Any] = {
        "page_rows": page,
        "sort_by_rate_ms": await _page_ms(
            window, TenantQuery(sort="rate", descending=True, limit=page)
        ),
        "last_page_ms": await _page_ms(window, TenantQuery(offset=last, limit=page)),
        "search_ms": await _page_ms(window, TenantQuery(match="t012", limit=page)),
        "search_matches": view.total,
        "first_page_ms": await _page_ms(window, TenantQuery(limit=page)),
        "rows_held": view.model.rowCount(),
    }
    table = view.table
    figures["sort_page_by_queued_ms"] = _timed(
        lambda: table.sortByColumn(5, Qt.SortOrder.DescendingOrder)
    )
    table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    return figures


async def _shoot(window: MainWindow, views: dict[str, QWidget], folder: Path) -> list[str]:
    """PNGs of ``views`` (``folder`` exists), each grabbed after it was shown a while."""
    saved = []
    queue = window.queue_view  # the queued notifications: dead ones there are none
    queue.state.setCurrentIndex(queue.state.findData(NotificationState.QUEUED.value))
    for name, view in views.items():
        window.tabs.setCurrentWidget(view)
        await asyncio.sleep(1.2)  # shown, laid out, and a sample or two drawn
        path = folder / f"{name}.png"
        window.grab().save(str(path))
        saved.append(str(path))
    return saved


async def _closed(bridge: Bridge, timeout_s: float = 20.0) -> float | None:
    """Stop the engine and close the bridge; the seconds it took, None past ``timeout_s``
    (the run's figures are kept either way)."""
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(bridge.aclose(), timeout_s)
    except TimeoutError:
        return None
    return round(time.perf_counter() - t0, 1)


async def _open_s(store: Store, concurrency: int) -> float:
    """What a console's launch reads before its window: a second engine opened on the store
    the tenants are in (the configuration read, the limiter configured), in s."""
    t0 = time.perf_counter()
    opened = build_engine(store, concurrency=concurrency, actor="console:bench-open")
    await opened.open()
    took = time.perf_counter() - t0
    await opened.close()
    return took


async def _shown(engine: Engine, folder: Path) -> tuple[Bridge, MainWindow, float, float]:
    """The bridge and the window made and shown over ``engine``; the seconds from making them
    to the window shown (the console's launch shows it greyed while its engine opens) and to
    the first sample drawn."""
    t0 = time.perf_counter()
    bridge = Bridge(engine)  # the default refresh: 500 ms, 5 min of history
    window = MainWindow(bridge, QSettings(str(folder / "c.ini"), QSettings.Format.IniFormat))
    window.resize(1440, 900)
    window.show()
    await asyncio.sleep(0)  # painted
    window_s = time.perf_counter() - t0
    first = asyncio.Event()
    bridge.sampled.connect(lambda _snap: first.set())
    bridge.start_sampling()
    await first.wait()
    await asyncio.sleep(0)  # the first sample drawn (the loop turns once)
    return bridge, window, window_s, time.perf_counter() - t0


async def bench_tenants(
    tenants: int,
    *,
    seconds: float,
    queued: int,
    concurrency: int,
    shots: Path | None = None,
    pair_limits: bool = True,
) -> dict[str, Any]:
    # An engine whose stop timed out may still be writing when the folder goes.
    with tempfile.TemporaryDirectory(prefix="omnipost-bench-", ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        box = SecretBox([SecretBox.generate_key()])
        url = f"sqlite:///{folder / 'bench.db'}"
        async with build_store(url, box) as store:
            await store.migrate()
            engine = build_engine(store, concurrency=concurrency, actor="console:bench")
            await engine.open()
            token = box.encrypt("customer@example.com")
            made = await populate(
                engine, url, tenants, queued=queued, token=token, pair_limits=pair_limits
            )
            rss_before = rss_mb()
            open_s = await _open_s(store, concurrency)
            with loaded_frozen(own_process=True):  # as the console does once its engine opened
                await engine.start()  # the engine alone first: what the console adds to it
                await asyncio.sleep(2.0)
                alone0, ta = engine.telemetry.totals().delivered, time.perf_counter()
                alone_lags = await _lagged(seconds / 2)
                alone_s = time.perf_counter() - ta
                alone = engine.telemetry.totals().delivered - alone0

                bridge, window, window_s, show_s = await _shown(engine, folder)
                await asyncio.sleep(2.0)  # settle: first samples, config read
                refreshes: list[float] = []
                bridge.sampled.connect(
                    lambda _snap: refreshes.append(window.dashboard.full_refresh_s)
                )
                delivered0 = engine.telemetry.totals().delivered
                t1 = time.perf_counter()
                dashboard_lags = await _lagged(seconds)
                elapsed = time.perf_counter() - t1
                delivered = engine.telemetry.totals().delivered - delivered0

                window.tabs.setCurrentWidget(window.tenants_view)
                tenants_lags = await _lagged(0.0, _scroll(window, min(seconds, 8.0)))
                table = await _table_ms(window, tenants)
                rss_after = rss_mb()
                saved = []
                if shots is not None:
                    views = {
                        "dashboard": window.dashboard,
                        "tenants": window.tenants_view,
                        "queue": window.queue_view,
                    }
                    shots.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, at the end
                    saved = await _shoot(window, views, shots)
                snap = await engine.snapshot(view=bridge.snapshot_view())
                buckets = snap.picks.configured if snap.picks else len(snap.buckets)
                window.close()
                stop_s = await _closed(bridge)
    return {
        "stop_s": stop_s,
        "benchmark": "console_tenants",
        "python": platform.python_version(),
        "pyside6": pyside_version,
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "tenants": tenants,
        "buckets": buckets,
        "queued_per_tenant": queued,
        "pair_limits": pair_limits,
        "populate_s": round(made.seconds, 1),
        "concurrency": concurrency,
        "refresh_ms": 500,
        "open_s": round(open_s, 2),
        "window_s": round(window_s, 2),
        "show_s": round(show_s, 2),
        "engine_alone": {
            "seconds": round(alone_s, 1),
            "delivered_per_s": round(alone / alone_s, 1),
            "loop_lag": summary_ms(alone_lags),
        },
        "dispatch": {
            "seconds": round(elapsed, 1),
            "delivered": delivered,
            "delivered_per_s": round(delivered / elapsed, 1),
            "loop_lag": summary_ms(dashboard_lags),
            "dashboard_refresh": summary_ms(refreshes),
        },
        "tenants_view": {"loop_lag": summary_ms(tenants_lags), **table},
        "rss": {
            "before_window_mb": round(rss_before, 1),
            "after_mb": round(rss_after, 1),
            "per_tenant_kb": round((rss_after - rss_before) * 1024 / tenants, 2),
        },
        "screenshots": saved,
    }
