"""Section 12 of docs/benchmarks.md: the HTTP API under load (``bench/http_api.py``)."""

from __future__ import annotations

from typing import Any

from reporting.sections import Context, Data

__all__ = ["api"]


def _range(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return (
        fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"
    )


def api(d: Data) -> Context:
    runs: list[dict[str, Any]] = d["runs"]
    stores = list(runs[0])
    rows = []
    for store in stores:
        of = [run[store] for run in runs]

        def pick(side: str, field: str, *, of: list[dict[str, Any]] = of) -> list[float]:
            return [float(r[side][field]) for r in of if side in r]

        def ratio(name: str, *, of: list[dict[str, Any]] = of) -> str:
            values = [float(r["ratios"][name]) for r in of if name in r["ratios"]]
            target = d["targets"][name]
            met = "met" if min(values) >= target else "**not met**"
            return f"{_range(values, '{:.2f}')}x (target {target:g}x: {met})"

        rows.append(
            [
                f"{store}: single POSTs/s",
                _range(pick("api", "single_per_s"), "{:,.0f}"),
                f"bare endpoint {_range(pick('bare', 'single_per_s'), '{:,.0f}')}",
                ratio("single_vs_bare"),
            ]
        )
        rows.append(
            [
                f"{store}: rows/s in batches of {d['batch']}",
                _range(pick("api", "batch_rows_per_s"), "{:,.0f}"),
                f"`enqueue_many` {_range(pick('direct', 'rows_per_s'), '{:,.0f}')}",
                ratio("batch_vs_direct"),
            ]
        )
        if "pgqueuer" in of[0]:
            rows.append(
                [
                    f"{store}: rows/s in batches of {d['batch']}",
                    _range(pick("api", "batch_rows_per_s"), "{:,.0f}"),
                    f"PgQueuer {_range(pick('pgqueuer', 'rows_per_s'), '{:,.0f}')}",
                    ratio("batch_vs_pgqueuer"),
                ]
            )
        rows.append(
            [
                f"{store}: p50 / p99 at half the single rate",
                f"{_range(pick('api', 'half_rate_p50_ms'), '{:.0f}')} / "
                f"{_range(pick('api', 'half_rate_p99_ms'), '{:.0f}')} ms",
                f"at {_range(pick('api', 'half_rate_per_s'), '{:,.0f}')}/s",
                "",
            ]
        )
    return {
        "rows": rows,
        "runs": len(runs),
        "seconds": d["seconds"],
        "concurrency": d["concurrency"],
        "load": d["machine"]["load_avg_1m"],
        "load_before": round(d["load_before"], 2),
    }
