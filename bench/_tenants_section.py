"""The many-tenants section of the benchmarks page (``bench/tenants.py``'s JSON)."""

from __future__ import annotations

from _sections import STORES, Context, Data, n

__all__ = ["tenants"]


def tenants(d: Data) -> Context:
    """Rows: store, limiter, tenants, steady rate, allowed, ratio, CPU ms per delivered,
    delivered of the backlog."""
    rows = [
        [
            STORES.get(r["store"], r["store"]),
            r["limiter"],
            n(r["tenants"]),
            n(r["steady_per_s"]),
            n(r["allowed_per_s"]),
            f"{r['ratio']:.2f}",
            f"{r['cpu_ms_per_delivered']:.2f}",
            f"{n(r['delivered'])} of {n(r['backlog'])}",
        ]
        for r in d["runs"]
    ]
    return {**d, "rows": rows}
