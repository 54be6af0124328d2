"""Fairness: a small tenant's enqueue-to-delivery latency while a large tenant bursts.

A small tenant enqueues one notification every ``--interval-ms`` (through ``Engine.enqueue``,
as an application would) for ``--seconds``, in three scenarios on a fresh store each:

- ``alone``: nothing else is queued;
- ``burst``: a large tenant has ``--backlog`` notifications queued when the engine starts, with
  no rate limit, so it could fill every worker by itself;
- ``burst_limited``: the same backlog, the large tenant limited to ``--big-rate`` per second;
- ``burst_batched``: as ``burst``, but the provider takes up to ``--batch-max`` messages per
  call (its ``batch_max`` option), as a provider with a batch API does: one latency per call.

The provider is the simulated one with ``--latency-ms`` per send, so the workers
(``--concurrency``) are the scarce resource. Latency is the delivery log's ``latency_s``
(enqueue to the provider's answer). Reported: the small tenant's p50, p95, p99 and max, the
large tenant's deliveries and their rate (over the run, or up to the last of them when the
backlog drained before the run's end), and the ratio of each burst scenario's percentiles to
``alone``. A FIFO queue would make the small tenant wait behind the whole backlog; the last
field estimates that wait (the backlog divided by the large tenant's delivery rate). Usage::

    .venv/bin/python bench/fairness.py [--backlog 20000] [--seconds 5] [--interval-ms 25]
        [--batch-max 16] [--skip-pg] [--out FILE]
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, fill, fresh_pg, open_engine, parser, pg_reachable

from engine import Engine, Limit

SCENARIOS = ("alone", "burst", "burst_limited", "burst_batched")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank, as the engine's telemetry computes it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


async def trickle(engine: Engine, interval_s: float, seconds: float) -> int:
    """Enqueue one notification of tenant ``small`` every ``interval_s`` for ``seconds``."""
    start = time.perf_counter()
    sent = 0
    while time.perf_counter() - start < seconds:
        await engine.enqueue("small", "noop", f"s{sent}@example.com", {"n": sent}, key=f"s{sent}")
        sent += 1
        await asyncio.sleep(max(0.0, start + sent * interval_s - time.perf_counter()))
    return sent


async def delivered(engine: Engine, tenant: str) -> list[tuple[float, float]]:
    """(when, latency) of each of ``tenant``'s deliveries."""
    rows = await engine.store.notifications.deliveries(
        engine.directory.tenant_id(tenant) or 0, limit=1_000_000
    )
    return [
        (r.ts, r.latency_s) for r in rows if r.latency_s is not None and r.outcome == "delivered"
    ]


async def scenario(url: str, name: str, args: Any) -> dict[str, Any]:
    options = {"latency_ms": str(args.latency_ms)}
    if name == "burst_batched":
        options["batch_max"] = str(args.batch_max)
    async with open_engine(
        url, concurrency=args.concurrency, batch=args.batch, provider_options=options
    ) as b:
        await b.engine.tenant_add("small")
        if name != "alone":
            limit = Limit(args.big_rate, args.big_rate / 10) if name == "burst_limited" else None
            await fill(b.engine, "big", args.backlog, limit=limit)
        started_at = time.time()  # the deliveries' ts are wall-clock times
        await b.engine.start()
        t0 = time.perf_counter()
        sent = await trickle(b.engine, args.interval_ms / 1000, args.seconds)
        await asyncio.sleep(0.5)  # let the last few arrive
        elapsed = time.perf_counter() - t0
        await b.engine.stop()
        small = [latency for _, latency in await delivered(b.engine, "small")]
        big_at = [at for at, _ in await delivered(b.engine, "big")] if name != "alone" else []
    row: dict[str, Any] = {"small_sent": sent, "small_delivered": len(small)}
    for q in (50, 95, 99):
        value = percentile(small, q)
        row[f"p{q}_ms"] = None if value is None else round(value * 1000, 1)
    row["max_ms"] = round(max(small) * 1000, 1) if small else None
    row["big_delivered"] = len(big_at)
    # Over the time the burst was draining: up to its last delivery when it drained early.
    span_s = min(elapsed, max(big_at) - started_at) if big_at else elapsed
    row["big_per_s"] = round(len(big_at) / span_s, 1)
    if big_at:
        row["fifo_wait_estimate_s"] = round(args.backlog / (len(big_at) / span_s), 1)
    return row


async def on_store(make_url: Any, args: Any) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name in SCENARIOS:
        async with make_url(name) as url:
            result[name] = await scenario(url, name, args)
    alone = result["alone"]
    for name in SCENARIOS[1:]:
        result[name]["over_alone"] = {
            key: round(result[name][key] / alone[key], 2)
            for key in ("p50_ms", "p95_ms", "p99_ms")
            if result[name][key] and alone[key]
        }
    return result


class _SqliteUrl:
    """``async with _SqliteUrl(name) as url``: a fresh SQLite file, removed after."""

    def __init__(self, name: str) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.url = f"sqlite:///{Path(self._tmp.name) / f'{name}.db'}"

    async def __aenter__(self) -> str:
        return self.url

    async def __aexit__(self, *exc: object) -> None:
        self._tmp.cleanup()


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--backlog", type=int, default=20_000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--interval-ms", type=float, default=25.0)
    p.add_argument("--latency-ms", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--big-rate", type=float, default=1000.0)
    p.add_argument("--batch-max", type=int, default=16)
    p.add_argument("--skip-pg", action="store_true")
    p.add_argument("--skip-sqlite", action="store_true")
    args = p.parse_args()
    report: dict[str, Any] = {
        "bench": "fairness",
        **{k: v for k, v in vars(args).items() if k != "out"},
    }
    if not args.skip_sqlite:
        report["sqlite"] = await on_store(_SqliteUrl, args)
    if not args.skip_pg and await pg_reachable():
        report["postgres"] = await on_store(lambda name: fresh_pg(f"fair_{name}"[:10]), args)
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
