"""Live progress lines for long CLI runs (worker, simulate)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time

from engine import BRIEF_VIEW, Engine, Snapshot

__all__ = ["FINAL_VIEW", "report_progress", "summary_line", "work_line"]

# The last line: the totals read now.
FINAL_VIEW = dataclasses.replace(BRIEF_VIEW, totals_every_s=0.0, totals_most_share=0.0)


def summary_line(snap: Snapshot, elapsed_s: float, rate_per_s: float | None = None) -> str:
    """One line: totals so far, the delivery rate (since the last line, or the mean), the
    queue over every tenant, latency and the first few buckets' levels."""
    if rate_per_s is None:
        rate_per_s = snap.totals.delivered / elapsed_s if elapsed_s > 0 else 0.0
    queue = snap.queue
    queued = sum(d.queued for d in snap.depth) if queue is None else queue.queued
    leased = sum(d.leased for d in snap.depth) if queue is None else queue.leased
    totals = snap.totals
    buckets = " ".join(f"{b.key}={b.tokens:.0f}/{b.burst:g}" for b in snap.buckets[:4]) + (
        " ..." if len(snap.buckets) > 4 else ""
    )
    p95 = "-" if snap.latency_p95_s is None else f"{snap.latency_p95_s * 1000:.0f}ms"
    return (
        f"[{elapsed_s:6.1f}s] delivered {totals.delivered} ({rate_per_s:.1f}/s) "
        f"queued {queued} in-flight {leased} throttled {totals.throttled} "
        f"retried {totals.failed} dead {totals.dead} p95 {p95}"
        + (f" held {totals.held} (provider unavailable)" if totals.held else "")
        + (f" expired {totals.expired}" if totals.expired else "")
        + (
            f" late p99 {snap.lateness_p99_s * 1000:.0f}ms"
            if snap.lateness_p99_s is not None
            else ""
        )
        + (f" | {buckets}" if snap.buckets else "")
    )


def work_line(snap: Snapshot) -> str:
    """How the worker's own work went: its longest loop stall, its claims and the pairs whose
    claim found nothing (rows another worker took first), the tokens taken again because
    their send started too late after them (the process was held up), and the limiter it
    ended on."""
    totals = snap.totals
    return (
        f"worker {snap.worker_id}: longest loop stall {snap.loop_stall_max_s * 1000:.0f} ms; "
        f"{totals.claims} claims, {totals.claims_empty} pairs found nothing to lease; "
        f"{totals.stale_tokens} stale tokens taken again; limiter {snap.limiter_backend}"
    )


async def report_progress(engine: Engine, interval_s: float = 1.0) -> None:
    """Print one line every ``interval_s`` to stderr until cancelled: a brief snapshot each
    (``BRIEF_VIEW``), whose cost does not grow with the tenants, so it may run beside the
    dispatch loop at any scale."""
    start = last_t = time.monotonic()
    last_delivered = engine.totals().delivered
    while True:
        await asyncio.sleep(interval_s)
        snap = await engine.snapshot(view=BRIEF_VIEW)
        now = time.monotonic()
        rate = (snap.totals.delivered - last_delivered) / max(now - last_t, 1e-6)
        last_t, last_delivered = now, snap.totals.delivered
        print(summary_line(snap, now - start, rate), file=sys.stderr, flush=True)
