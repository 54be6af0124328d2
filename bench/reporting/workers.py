"""The many-workers section of the benchmarks page (``bench/workers.py``'s JSON)."""

from __future__ import annotations

from typing import Any

from reporting.sections import Context, Data, n

__all__ = ["workers"]


def workers(d: Data) -> Context:
    """One row per (tenants, workers): the ratio to the limits and the CPU figures, each the
    range over the repeats; the pairs that found nothing, stalls and fallbacks at their worst."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for run in d["runs"]:
        groups.setdefault((run["tenants"], run["workers"]), []).append(run)
    rows = []
    for (tenants, count), runs in sorted(groups.items()):
        stalls = [s for r in runs for s in r["longest_stall_ms"] if s is not None]
        rows.append(
            [
                n(tenants),
                str(count),
                _spread([r["ratio"] for r in runs]),
                _spread([r["workers_cpu_ms_per_delivered"] for r in runs]),
                _spread([r.get("steady_workers_cpu_ms_per_delivered") for r in runs]),
                _spread([r.get("steady_postgres_cpu_ms_per_delivered") for r in runs]),
                _spread([r.get("steady_redis_cpu_ms_per_delivered") for r in runs]),
                _spread([r["empty_claims_per_delivered"] for r in runs], 3),
                n(max(stalls)) if stalls else "-",
                str(sum(r["fell_back"] for r in runs)),
            ]
        )
    over = {
        "tenants": sum(r["over_envelope"]["tenants"] for r in d["runs"]),
        "providers": sum(r["over_envelope"]["providers"] for r in d["runs"]),
        "fullest": max(r["fullest_window_of_bound"] for r in d["runs"]),
    }
    return {**d, "rows": rows, "over": over, "repeat": len(d["runs"]) // max(len(groups), 1)}


def _spread(values: list[float | None], digits: int = 2) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    low, high = f"{min(found):.{digits}f}", f"{max(found):.{digits}f}"
    return low if low == high else f"{low}-{high}"
