"""``omnipost stats``: queue depth, recent throughput, workers, limits and bucket levels."""

from __future__ import annotations

from dataclasses import dataclass

from app.as_json import (
    bucket_json,
    depth_json,
    health_json,
    limit_json,
    retention_json,
    worker_json,
)
from app.commands.base import open_engine
from app.commands.configure import fmt_health
from app.output import fmt_retention, print_json, print_table
from app.session import Context
from engine import (
    BucketLevel,
    Outcome,
    ProviderHealth,
    ProviderRecord,
    Retention,
    Snapshot,
    TenantRecord,
    WorkerRecord,
    masked_url,
)

__all__ = ["stats"]

WINDOW_S = 60  # of the recent outcomes shown


@dataclass(frozen=True, slots=True)
class _Stats:
    snap: Snapshot
    recent: dict[Outcome, int]
    tenants: list[TenantRecord]
    providers: list[ProviderRecord]
    workers: list[WorkerRecord]
    retention: Retention
    health: dict[str, ProviderHealth]

    @property
    def delivered_per_s(self) -> float:
        return self.recent[Outcome.DELIVERED] / WINDOW_S

    @property
    def shared_buckets(self) -> tuple[BucketLevel, ...] | None:
        """Shared bucket levels, or None when buckets live in each worker (none to read)."""
        return None if self.snap.limiter_backend == "local" else self.snap.buckets


async def stats(ctx: Context, *, redis_url: str | None = None, as_json: bool = False) -> int:
    async with open_engine(ctx, redis_url=redis_url) as engine:
        found = _Stats(
            snap=await engine.snapshot(with_workers=True),
            recent=await engine.recent_outcomes(WINDOW_S),
            tenants=await engine.tenants(),
            providers=await engine.providers(),
            workers=await engine.workers(),
            retention=await engine.retention(),
            health=await engine.provider_health(),
        )
    if as_json:
        _print_json(found, masked_url(ctx.db_url))
    else:
        _print_text(found, masked_url(ctx.db_url))
    return 0


def _print_json(found: _Stats, store: str) -> None:
    buckets = found.shared_buckets
    print_json(
        {
            "store": store,
            "depth": [depth_json(d) for d in found.snap.depth],
            "last_60s": {o.value: n for o, n in found.recent.items()},
            "delivered_per_s_60s": found.delivered_per_s,
            "workers": [worker_json(w) for w in found.workers],
            "limiter": {
                "backend": found.snap.limiter_backend,
                "buckets": None if buckets is None else [bucket_json(b) for b in buckets],
            },
            "limits": {
                **{f"tenant:{t.name}": limit_json(t.limit) for t in found.tenants},
                **{f"provider:{p.name}": limit_json(p.limit) for p in found.providers},
            },
            "retention": retention_json(found.retention),
            "health": [health_json(h) for _, h in sorted(found.health.items())],
        }
    )


def _print_text(found: _Stats, store: str) -> None:
    print(f"store {store}")
    print_table(
        ["TENANT", "QUEUED", "IN FLIGHT", "DELIVERED", "DEAD", "OLDEST QUEUED"],
        [
            (
                d.tenant,
                d.queued,
                d.leased,
                d.delivered,
                d.dead,
                "-" if d.oldest_queued_age_s is None else f"{d.oldest_queued_age_s:.1f}s",
            )
            for d in found.snap.depth
        ],
    )
    print(
        "last 60 s: "
        + ", ".join(f"{o.value} {n}" for o, n in found.recent.items())
        + f" ({found.delivered_per_s:.1f} delivered/s)"
    )
    print(f"retention: {fmt_retention(found.retention)}")
    _print_health(found)
    print(f"live workers: {len(found.workers)}")
    for w in found.workers:
        print(f"  {w.id} state {w.state} concurrency {w.concurrency} delivered {w.delivered}")
    _print_buckets(found)


def _print_health(found: _Stats) -> None:
    now = found.snap.ts
    print_table(
        ["PROVIDER", "HEALTH", "FAILURES", "LAST ERROR"],
        [
            (name, fmt_health(h, now), h.failures, h.last_error or "-")
            for name, h in sorted(found.health.items())
        ],
    )


def _print_buckets(found: _Stats) -> None:
    buckets = found.shared_buckets
    if buckets is None:
        print("limiter: local to each worker (pass --redis to read shared bucket levels)")
        return
    backend = found.snap.limiter_backend
    note = (
        " - REDIS UNREACHABLE, each worker uses its share locally"
        if backend == "local-fallback"
        else ""
    )
    print(f"limiter: {backend}{note}")
    print_table(
        ["BUCKET", "TOKENS", "BURST", "RATE/S"],
        [(str(b.key), f"{b.tokens:.1f}", b.burst, b.rate_per_s) for b in buckets],
    )
