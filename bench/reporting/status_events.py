"""The status-events section of the benchmarks page (``bench/status_events.py``'s JSON)."""

from __future__ import annotations

from reporting.sections import Context, Data, n

__all__ = ["status_events"]

_STORES = {"sqlite": "SQLite", "postgres": "Postgres"}


def _spread(s: dict[str, float]) -> str:
    return f"{n(s['median'])} ({n(s['min'])} - {n(s['max'])})"


def status_events(d: Data) -> Context:
    """A row per store for the drain with and without an endpoint, and one for the courier
    beside the bare clients, with the outbox before and after a prune."""
    drain_rows, event_rows = [], []
    for key, name in _STORES.items():
        store = d.get(key) or {}
        drain = store.get("drain")
        if drain:
            drain_rows.append(
                [
                    name,
                    _spread(drain["without_per_s"]),
                    _spread(drain["with_endpoint_per_s"]),
                    f"**{drain['ratio']:.2f}**",
                    n(drain["events_waiting_at_the_end"]),
                ]
            )
        events = store.get("events")
        if events:
            event_rows.append(
                [
                    name,
                    n(events["courier_events_per_s"]),
                    n(events["httpx_client_posts_per_s"]),
                    n(events["raw_posts_per_s"]),
                    f"{n(events['outbox_rows_delivered'])} ->"
                    f" {n(events['outbox_rows_after_prune'])}",
                ]
            )
    return {**d, "drain_rows": drain_rows, "event_rows": event_rows}
