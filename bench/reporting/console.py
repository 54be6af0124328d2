"""The figures of the benchmarks page's section on the console at many tenants, from
``bench/console.py --tenants N``'s JSON (``_console_many``). The sentences are the template's."""

from __future__ import annotations

from reporting.sections import Context, Data, Rows, n

__all__ = ["console"]

LAG_TARGET_MS = 16.0
SHOW_TARGET_S = 3.0
RATE_TARGET_PER_S = 1000.0


def _lag(d: Data) -> str:
    lag = d.get("loop_lag") or {}
    return f"{n(lag.get('p50_ms'), 1)} / **{n(lag.get('p99_ms'), 1)}** / {n(lag.get('max_ms'))}"


def _rows(d: Data) -> Rows:
    alone, dispatch, tenants = d["engine_alone"], d["dispatch"], d["tenants_view"]
    return [
        ["the engine alone, no window", _lag(alone), n(alone["delivered_per_s"]), "-"],
        [
            "the console on its dashboard",
            _lag(dispatch),
            n(dispatch["delivered_per_s"]),
            n(dispatch.get("dashboard_refresh", {}).get("p50_ms"), 1),
        ],
        ["the console, Tenants & limits scrolled", _lag(tenants), "-", "-"],
    ]


def _table(d: Data) -> Rows:
    t = d["tenants_view"]
    every = f"{d['tenants']:,}"
    return [
        [f"the first page of {every}, by name", n(t["first_page_ms"], 1)],
        [
            "every tenant sorted by rate, its first page (a header click)",
            n(t["sort_by_rate_ms"], 1),
        ],
        ["the last page, by name", n(t["last_page_ms"], 1)],
        [f"a search: {t['search_matches']:,} names contain “t012”", n(t["search_ms"], 1)],
        ["the page shown sorted by a live column (Queued)", n(t["sort_page_by_queued_ms"], 1)],
    ]


def console(d: Data) -> Context:
    """Rows of loop lag (engine alone, dashboard, tenants view) and of the table's sort and
    filter; the targets and whether each was met."""
    p99 = d["dispatch"]["loop_lag"].get("p99_ms")
    rate = d["dispatch"]["delivered_per_s"]
    return {
        **d,
        "rows": _rows(d),
        "table": _table(d),
        "lag_target_ms": LAG_TARGET_MS,
        "show_target_s": SHOW_TARGET_S,
        "rate_target": RATE_TARGET_PER_S,
        "lag_met": p99 is not None and p99 <= LAG_TARGET_MS,
        "show_met": d["show_s"] <= SHOW_TARGET_S,
        "live_s": d.get("open_s", 0.0) + d["show_s"],
        "live_met": d.get("open_s", 0.0) + d["show_s"] <= SHOW_TARGET_S,
        "rate_met": rate >= RATE_TARGET_PER_S,
    }
