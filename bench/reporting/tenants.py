"""The many-tenants section of the benchmarks page (``bench/tenants.py``'s JSON)."""

from __future__ import annotations

from reporting.sections import STORES, Context, Data, n

__all__ = ["tenants"]


def tenants(d: Data) -> Context:
    """Rows: store, limiter, tenants, steady rate, allowed, ratio (the range of the repeats),
    CPU ms per delivered (likewise), the worker's peak RSS, delivered of the backlog."""
    rows = [
        [
            STORES.get(r["store"], r["store"]),
            r["limiter"],
            n(r["tenants"]),
            n(r["steady_per_s"]),
            n(r["allowed_per_s"]),
            _spread(r.get("ratios", [r["ratio"]])),
            _spread(r.get("cpu_ms", [r["cpu_ms_per_delivered"]])),
            f"{r['rss_mb']:.0f}" if "rss_mb" in r else "-",
            f"{n(r['delivered'])} of {n(r['backlog'])}",
        ]
        for r in d["runs"]
    ]
    checked = [r for r in d["runs"] if "over_envelope" in r]
    envelope = (
        {
            "tenants_over": sum(r["over_envelope"]["tenants"] for r in checked),
            "providers_over": sum(r["over_envelope"]["providers"] for r in checked),
            "fullest": max(r["fullest_window_of_bound"] for r in checked),
        }
        if checked
        else None
    )
    return {**d, "rows": rows, "envelope": envelope}


def _spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"
