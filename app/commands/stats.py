"""``omnipost stats``: queue depth, recent throughput, workers, limits and bucket levels.

At many tenants it shows the ``SHOWN`` with the most queued and the totals over every tenant,
read as a console's snapshot reads them (one sum per state, the deepest picked inside the
database): the same few rows at 30 tenants as at 100,000. ``--all`` reads and lists every
tenant; ``--tenant NAME`` only the named ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from app.as_json import (
    bucket_json,
    circuit_json,
    depth_json,
    limit_json,
    retention_json,
    worker_json,
)
from app.commands.base import open_engine
from app.commands.configure import fmt_circuit
from app.output import fmt_retention, print_json, print_table
from app.session import Context
from engine import (
    BucketLevel,
    Circuit,
    NotFound,
    Outcome,
    ProviderRecord,
    Retention,
    Snapshot,
    SnapshotView,
    TenantRecord,
    WorkerRecord,
    masked_url,
)

__all__ = ["stats"]

WINDOW_S = 60  # of the recent outcomes shown
SHOWN = 20  # tenants listed without --all (those with the most queued)


@dataclass(frozen=True, slots=True)
class _Stats:
    snap: Snapshot
    recent: dict[Outcome, int]
    tenants: list[TenantRecord]  # those shown
    tenant_count: int  # in the store
    every: bool  # every tenant was read (else the deepest and the named)
    named: bool  # only the tenants named were asked for
    providers: list[ProviderRecord]
    workers: list[WorkerRecord]
    retention: Retention
    health: dict[str, Circuit]

    @property
    def delivered_per_s(self) -> float:
        return self.recent[Outcome.DELIVERED] / WINDOW_S

    @property
    def shared_buckets(self) -> tuple[BucketLevel, ...] | None:
        """Shared bucket levels, or None when buckets live in each worker (none to read)."""
        return None if self.snap.limiter_backend == "local" else self.snap.buckets

    def queue(self) -> dict[str, int | None]:
        """Notifications per state over every tenant, and how many tenants have queued work."""
        q = self.snap.queue
        if q is not None:
            return {
                "queued": q.queued,
                "leased": q.leased,
                "delivered": q.delivered,
                "dead": q.dead,
                "cancelled": q.cancelled,
                "suppressed": q.suppressed,
                "scheduled": q.scheduled,
                "expired": q.expired,
                "tenants_queued": q.tenants_queued,
            }
        depth = self.snap.depth
        return {
            "queued": sum(d.queued for d in depth),
            "leased": sum(d.leased for d in depth),
            "delivered": sum(d.delivered for d in depth),
            "dead": sum(d.dead for d in depth),
            "cancelled": sum(d.cancelled for d in depth),
            "suppressed": sum(d.suppressed for d in depth),
            "scheduled": sum(d.scheduled for d in depth),
            "expired": sum(d.expired for d in depth),
            "tenants_queued": sum(1 for d in depth if d.queued),
        }


async def stats(
    ctx: Context,
    *,
    redis_url: str | None = None,
    as_json: bool = False,
    every: bool = False,
    tenants: Sequence[str] = (),
) -> int:
    async with open_engine(ctx, redis_url=redis_url) as engine:
        records = await engine.tenants()
        named = list(dict.fromkeys(tenants))
        unknown = sorted(set(named) - {t.name for t in records})
        if unknown:
            raise NotFound(f"no tenant named {unknown[0]!r}.")
        every = every or len(records) <= SHOWN
        if every:
            snap = await engine.snapshot(with_workers=True)
        else:
            view = SnapshotView(
                emptiest=8, busiest=8, tenants=tuple(named), deepest=SHOWN, totals_every_s=0.0
            )
            snap = await engine.snapshot(with_workers=True, view=view)
            ranked = sorted(snap.depth, key=lambda d: (-d.queued, d.tenant))  # deepest first
            snap = dataclasses.replace(snap, depth=tuple(ranked))
        if named:
            wanted = set(named)
            snap = dataclasses.replace(
                snap, depth=tuple(d for d in snap.depth if d.tenant in wanted)
            )
        shown = {d.tenant for d in snap.depth} | set(named)
        found = _Stats(
            snap=snap,
            recent=await engine.recent_outcomes(WINDOW_S),
            tenants=[t for t in records if (every and not named) or t.name in shown],
            tenant_count=len(records),
            every=every,
            named=bool(named),
            providers=await engine.providers(),
            workers=await engine.workers(),
            retention=await engine.retention(),
            health=await engine.circuit_states(),
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
            "queue": found.queue(),
            "tenants": {"total": found.tenant_count, "all_read": found.every},
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
            "health": [circuit_json(h) for _, h in sorted(found.health.items())],
            "status_events": _events_json(found.snap),
        }
    )


def _events_json(snap: Snapshot) -> dict[str, object] | None:
    figures = snap.events
    if figures is None:
        return None
    return {
        "written": figures.written,
        "endpoints": [
            {
                "tenant": e.tenant,
                "id": e.endpoint_id,
                "enabled": e.enabled,
                "pending": e.pending,
                "held": e.held,
                "given_up": e.failed,
                "oldest_pending_age_s": e.oldest_pending_age_s,
            }
            for e in figures.endpoints
        ],
    }


def _print_text(found: _Stats, store: str) -> None:
    print(f"store {store}")
    print_table(
        [
            "TENANT",
            "QUEUED",
            "SCHEDULED",
            "IN FLIGHT",
            "DELIVERED",
            "DEAD",
            "CANCELLED",
            "SUPPRESSED",
            "EXPIRED",
            "OLDEST QUEUED",
        ],
        [
            (
                d.tenant,
                d.queued,
                d.scheduled,
                d.leased,
                d.delivered,
                d.dead,
                d.cancelled,
                d.suppressed,
                d.expired,
                "-" if d.oldest_queued_age_s is None else f"{d.oldest_queued_age_s:.1f}s",
            )
            for d in found.snap.depth
        ],
    )
    q = found.queue()
    print(
        f"all {found.tenant_count} tenants: queued {q['queued']}, in flight {q['leased']},"
        f" delivered {q['delivered']}, dead {q['dead']}, cancelled {q['cancelled']},"
        f" suppressed {q['suppressed']}, scheduled {q['scheduled']}, expired {q['expired']};"
        f" {q['tenants_queued']} with queued work"
    )
    if not (found.every or found.named):
        print(
            f"listed: the {len(found.snap.depth)} with the most queued"
            " (--all lists every tenant, --tenant NAME one)"
        )
    print(
        "last 60 s: "
        + ", ".join(f"{o.value} {n}" for o, n in found.recent.items())
        + f" ({found.delivered_per_s:.1f} delivered/s)"
    )
    print(f"retention: {fmt_retention(found.retention)}")
    _print_circuits(found)
    _print_events(found.snap)
    print(f"live workers: {len(found.workers)}")
    for w in found.workers:
        print(f"  {w.id} state {w.state} concurrency {w.concurrency} delivered {w.delivered}")
    _print_buckets(found)


def _print_circuits(found: _Stats) -> None:
    now = found.snap.ts
    print_table(
        ["PROVIDER", "CIRCUIT", "FAILURES", "LAST ERROR"],
        [
            (name, fmt_circuit(h, now), h.failures, h.last_error or "-")
            for name, h in sorted(found.health.items())
        ],
    )


def _print_events(snap: Snapshot) -> None:
    """Status events: each endpoint's outbox (nothing while no tenant has an endpoint)."""
    figures = snap.events
    if figures is None or not figures.endpoints:
        return
    print(f"status events written: {figures.written}")
    print_table(
        ["TENANT", "WEBHOOK", "STATE", "PENDING", "HELD", "GAVE UP", "OLDEST PENDING"],
        [
            (
                e.tenant,
                e.endpoint_id,
                "enabled" if e.enabled else "disabled",
                e.pending,
                e.held,
                e.failed,
                "-" if e.oldest_pending_age_s is None else f"{e.oldest_pending_age_s:.0f} s",
            )
            for e in figures.endpoints
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
