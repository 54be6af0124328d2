"""The useful-life section of the benchmarks page (``bench/lifetimes.py``'s JSON)."""

from __future__ import annotations

from reporting.sections import Context, Data, n

__all__ = ["lifetimes"]

_STORES = {"sqlite": "SQLite", "postgres": "Postgres"}


def lifetimes(d: Data) -> Context:
    """A row per store for the drain beside a million scheduled rows and the workers' memory,
    and one for the rows due in the same second."""
    drain_rows, together_rows = [], []
    for key, name in _STORES.items():
        store = d["stores"].get(key, {})
        drain = store.get("drain")
        if drain:
            empty, later = drain["empty_per_s"], drain["scheduled_per_s"]
            drain_rows.append(
                [
                    name,
                    f"{n(empty['median'])} ({n(empty['min'])} - {n(empty['max'])})",
                    f"{n(later['median'])} ({n(later['min'])} - {n(later['max'])})",
                    f"**{drain['ratio']:.2f}**",
                    f"{drain['scheduled_fill_s']:.0f}",
                    f"{drain['empty_worker_rss_mb']:.1f}",
                    f"{drain['scheduled_worker_rss_mb']:.1f}",
                    f"{drain['rss_ratio']:.3f}",
                ]
            )
        together = store.get("together")
        if together:
            together_rows.append(
                [
                    name,
                    n(together["count"]),
                    together["limit"],
                    f"{together['first_late_s']:.3f}",
                    f"{together['lateness_p50_s']:.2f} / {together['lateness_p99_s']:.2f}",
                    f"{together['imposed_last_s']:.1f}",
                    f"{together['excess_p50_s']:.3f} / **{together['excess_p99_s']:.3f}**",
                ]
            )
    return {**d, "drain_rows": drain_rows, "together_rows": together_rows}
