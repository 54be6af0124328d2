"""``omnipost plan``: what if? A burst, the backlog or a replay of recent traffic, played in
virtual time against the limits in force and, when changes are proposed, against those too.
Nothing is sent and nothing is written; the engine's ``plan`` does the work."""

from __future__ import annotations

from collections.abc import Sequence

from app.commands.base import open_engine
from app.output import fmt_change, fmt_duration, print_json, print_table
from app.session import Context
from engine import LimitChange, PlanReport, PlanResult, ProviderPlan, TenantPlan, Traffic, fmt_limit

__all__ = ["plan"]

_SPLIT = "|"  # the column between the current plan and the proposed one


async def plan(
    ctx: Context,
    traffic: Traffic,
    *,
    changes: Sequence[LimitChange] = (),
    concurrency: int | None = None,
    as_json: bool = False,
) -> int:
    """Plan ``traffic`` now and, with ``changes`` or a ``concurrency``, as proposed; print the
    comparison. Unknown names raise NotFound, bad traffic or limits ConfigError (exit 2)."""
    async with open_engine(ctx) as engine:
        report = await engine.plan(traffic, changes=tuple(changes), concurrency=concurrency)
    if as_json:
        print_json(report.as_json())
    else:
        _print_text(report)
    return 0


def _print_text(report: PlanReport) -> None:
    current, proposed = report.current, report.proposed
    print(f"plan of {report.traffic}")
    print(f"current: concurrency {current.concurrency}, {_limits(current)}")
    if proposed is not None:
        changed = [str(c) for c in report.changes]
        if proposed.concurrency != current.concurrency:
            changed.append(f"concurrency {proposed.concurrency}")
        print(f"proposed: {', '.join(changed) or 'no change'}")
    print()
    _tenant_table(current, proposed)
    print(_total_line(current, proposed))
    for line in expiry_lines(current, proposed):
        print(line)
    print()
    _provider_table(current, proposed)
    print()
    print(_footer(current, proposed))


def _limits(result: PlanResult) -> str:
    if not result.limits:
        return "no limits"
    return ", ".join(f"{name} {fmt_limit(limit)}" for name, limit in result.limits)


# -- tenants -----------------------------------------------------------------------------------


def _tenant_table(current: PlanResult, proposed: PlanResult | None) -> None:
    headers = ["TENANT", "NOTIFICATIONS", "DRAIN", "WAIT P50/P95/P99", "MOST QUEUED", "PACED BY"]
    if proposed is not None:
        headers += [_SPLIT, "PROPOSED DRAIN", "CHANGE", "WAIT P50/P95/P99", "MOST QUEUED"]
        headers += ["PACED BY"]
    rows: list[list[object]] = []
    for now in current.tenants:
        row = [now.tenant, now.notifications, *_tenant_cells(now)]
        if proposed is not None:
            then = _tenant_in(proposed, now.tenant)
            drain, *rest = _tenant_cells(then) if then is not None else ["-"] * 4
            change = fmt_change(now.drain_s, then.drain_s) if then is not None else "-"
            row += [_SPLIT, drain, change, *rest]
        rows.append(row)
    print_table(headers, rows)


def _tenant_cells(plan: TenantPlan) -> list[object]:
    """Drain, waits, most queued, paced by."""
    waits = (plan.wait_p50_s, plan.wait_p95_s, plan.wait_p99_s)
    return [
        _drain(plan.drain_s),
        "/".join(fmt_duration(w) for w in waits),
        plan.max_queued,
        plan.paced_by,
    ]


def _tenant_in(result: PlanResult, name: str) -> TenantPlan | None:
    try:
        return result.tenant(name)
    except KeyError:
        return None


def _drain(drain_s: float | None) -> str:
    return "unfinished" if drain_s is None else fmt_duration(drain_s)


def _total_line(current: PlanResult, proposed: PlanResult | None) -> str:
    """``all 400 drained in 39.0s now, in 1m39s as proposed: +1m00s (+154%)``."""
    line = f"all {current.notifications:,} drained {_within(current)}"
    if proposed is None:
        return line
    line += f" now, {_within(proposed)} as proposed"
    if current.total_drain_s is not None and proposed.total_drain_s is not None:
        line += f": {fmt_change(current.total_drain_s, proposed.total_drain_s)}"
    return line


def expiry_lines(current: PlanResult, proposed: PlanResult | None) -> list[str]:
    """A sentence per tenant whose notifications would expire (their deadline passing before
    they are sent), under the limits in force and as proposed: ``under these limits 1,240 of
    acme's 5,000 expire; as proposed none do``."""
    lines = []
    for now in current.tenants:
        then = _tenant_in(proposed, now.tenant) if proposed is not None else None
        if not now.expired and (then is None or not then.expired):
            continue
        line = f"under these limits {_expire(now.expired, now)}"
        if then is not None:
            line += f"; as proposed {_expire(then.expired, then) if then.expired else 'none do'}"
        lines.append(line)
    return lines


def _expire(n: int, plan: TenantPlan) -> str:
    if not n:
        return f"none of {plan.tenant}'s {plan.notifications:,} expire"
    return f"{n:,} of {plan.tenant}'s {plan.notifications:,} expire"


def _within(result: PlanResult) -> str:
    if result.total_drain_s is None:
        return f"not within the plan's horizon ({result.unfinished:,} still queued)"
    return f"in {fmt_duration(result.total_drain_s)}"


# -- providers ---------------------------------------------------------------------------------


def _provider_table(current: PlanResult, proposed: PlanResult | None) -> None:
    headers = ["PROVIDER", "SENDS", "RATE", "LIMIT", "UTILISATION"]
    if proposed is not None:
        headers += [_SPLIT, "PROPOSED SENDS", "RATE", "LIMIT", "UTILISATION"]
    headers.append("MODEL")
    rows: list[list[object]] = []
    for now in current.providers:
        row: list[object] = [now.provider, *_provider_cells(now)]
        if proposed is not None:
            then = next((p for p in proposed.providers if p.provider == now.provider), None)
            row += [_SPLIT, *(_provider_cells(then) if then is not None else ["-"] * 4)]
        row.append(now.model.source)
        rows.append(row)
    print_table(headers, rows)


def _provider_cells(plan: ProviderPlan) -> list[object]:
    """Sends, rate while busy, limit, utilisation of the limit."""
    utilisation = "-" if plan.utilisation is None else f"{plan.utilisation:.0%}"
    return [plan.sends, f"{plan.rate_per_s:.3g}/s", fmt_limit(plan.limit), utilisation]


def _footer(current: PlanResult, proposed: PlanResult | None) -> str:
    results = [current] if proposed is None else [current, proposed]
    drains = [r.total_drain_s for r in results]
    virtual = (
        "up to its horizon"
        if None in drains
        else f"{fmt_duration(max(d or 0.0 for d in drains))} of virtual time"
    )
    real_s = sum(r.planned_in_s for r in results)
    return f"planned {virtual} in {fmt_duration(real_s)}; nothing was sent or written."
