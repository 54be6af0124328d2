"""Section 13 of docs/benchmarks.md: the HTTP provider kinds beside bare clients
(``bench/providers.py``)."""

from __future__ import annotations

from reporting.sections import Context, Data

__all__ = ["providers"]

_NAMES = {"twilio": "Twilio (HTTP/1.1)", "fcm": "FCM (HTTP/1.1)", "apns": "APNs (HTTP/2, TLS)"}


def providers(d: Data) -> Context:
    rows = []
    for kind, label in _NAMES.items():
        runs = [run[kind] for run in d["runs"] if kind in run]
        if not runs:
            continue
        ours = [r["provider"]["per_s"] for r in runs]
        bare = [r["bare"]["per_s"] for r in runs]
        ratios = [r["ratio"] for r in runs]
        met = "met" if min(ratios) >= d["target"] else "**not met**"
        rows.append(
            [
                label,
                f"{min(ours):,.0f}-{max(ours):,.0f}",
                f"{min(bare):,.0f}-{max(bare):,.0f}",
                f"{min(ratios):.2f}-{max(ratios):.2f}x ({met})",
            ]
        )
    return {
        "rows": rows,
        "count": d["count"],
        "concurrency": d["concurrency"],
        "runs": len(d["runs"]),
        "target": d["target"],
        "load": d["machine"]["load_avg_1m"],
    }
