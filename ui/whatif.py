"""The burst simulator's what-if mode without Qt: the limits in force beside the ones the
operator proposes, the plan request they make, and what of a plan to show.

``WhatIf`` holds the rows (one per tenant, provider and existing pair limit, with its current
limit), the proposals as typed, and the plan on screen with the request it answered. The view
asks it for the request the inputs make now (``request``), whether the plan on screen may be
applied (``can_apply``: it answered exactly these inputs and proposed a limit), and for the
curves and comparison rows to draw (``curves``, ``compare``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from engine import (
    BacklogTraffic,
    BucketKey,
    BurstTraffic,
    ConfigError,
    Limit,
    LimitChange,
    PlanReport,
    PlanResult,
    TenantPlan,
    WorkerRecord,
    parse_rate,
)
from ui.fmt import fmt_bucket, fmt_count, fmt_duration, fmt_latency

__all__ = [
    "Cell",
    "Comparison",
    "Curve",
    "LimitRow",
    "PlanRequest",
    "Proposal",
    "WhatIf",
    "compare",
    "curves",
    "fmt_paced",
    "limit_rows",
    "live_concurrency",
    "summary",
    "to_change",
]

PlanTraffic = BurstTraffic | BacklogTraffic
V = TypeVar("V")
_REMOVE = ("none", "unlimited", "off")


@dataclass(frozen=True, slots=True)
class LimitRow:
    key: BucketKey
    current: Limit | None

    @property
    def label(self) -> str:
        return fmt_bucket(self.key)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposed limit as typed: a rate (``50``, ``300/min``, ``none`` removes the limit) and
    a burst; empty fields leave the current value."""

    rate: str = ""
    burst: str = ""

    @property
    def empty(self) -> bool:
        return not self.rate.strip() and not self.burst.strip()


def limit_rows(
    tenants: Sequence[str], providers: Sequence[str], limits: Mapping[BucketKey, Limit]
) -> list[LimitRow]:
    """One row per tenant, then per provider, then per pair limit that exists."""
    keys = [BucketKey.for_tenant(t) for t in tenants]
    keys += [BucketKey.for_provider(p) for p in providers]
    keys += sorted((k for k in limits if k.tenant and k.provider), key=str)
    return [LimitRow(key, limits.get(key)) for key in keys]


def live_concurrency(workers: Sequence[WorkerRecord], own: int) -> int:
    """The sends a plan runs at once now: every running or paused worker's, or ``own`` (this
    console's engine) when none is live. ``engine.plan`` counts the same way."""
    return sum(w.concurrency for w in workers if w.state in ("running", "paused")) or own


def to_change(row: LimitRow, proposal: Proposal) -> LimitChange | None:
    """The change ``proposal`` makes to ``row``'s limit; None when it changes nothing. Raises
    ``ConfigError`` with one sentence that names the row."""
    if proposal.empty:
        return None
    rate_text, burst_text = proposal.rate.strip(), proposal.burst.strip()
    try:
        if rate_text.lower() in _REMOVE:
            if burst_text:
                raise ConfigError("a removed limit has no burst; clear the burst.")
            change = LimitChange(row.key, None)
        elif rate_text:
            burst = _burst(burst_text) if burst_text else None
            change = LimitChange(row.key, _rate(rate_text), burst)
        elif row.current is None:
            raise ConfigError("it has no limit to change the burst of; give a rate as well.")
        else:
            change = LimitChange(row.key, row.current.rate_per_s, _burst(burst_text))
    except ConfigError as exc:
        raise ConfigError(f"{row.label}: {exc.message}") from None
    return None if change.limit(row.current) == row.current else change


def _rate(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        return parse_rate(text)  # 50/s, 300/min, 1000/h; says what it cannot read
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"the rate must be a finite number above 0, not {text[:40]}.")
    return number


def _burst(text: str) -> float:
    try:
        burst = float(text)
    except ValueError:
        raise ConfigError(f"cannot read {text[:40]!r} as a burst; write a number.") from None
    if not math.isfinite(burst) or burst < 1:
        raise ConfigError(f"the burst must be a finite number of at least 1, not {text[:40]}.")
    return burst


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What one plan is asked: the traffic, the proposed changes and concurrency (None: as
    now), and the limits in force when it was asked."""

    traffic: PlanTraffic
    changes: tuple[LimitChange, ...]
    concurrency: int | None
    rows: tuple[LimitRow, ...]

    @property
    def proposes(self) -> bool:
        return bool(self.changes) or self.concurrency is not None


class WhatIf:
    """The what-if mode's state: rows, proposals, and the plan on screen."""

    def __init__(self) -> None:
        self.rows: list[LimitRow] = []
        self.proposals: dict[BucketKey, Proposal] = {}
        self.shown: tuple[PlanRequest, PlanReport] | None = None

    def set_limits(
        self, tenants: Sequence[str], providers: Sequence[str], limits: Mapping[BucketKey, Limit]
    ) -> None:
        """The limits in force changed (or were read): proposals of rows that are gone go."""
        self.rows = limit_rows(tenants, providers, limits)
        keys = {row.key for row in self.rows}
        self.proposals = {k: p for k, p in self.proposals.items() if k in keys}

    def propose(self, key: BucketKey, *, rate: str | None = None, burst: str | None = None) -> None:
        """Set the rate and/or the burst typed for ``key``'s row."""
        old = self.proposals.get(key, Proposal())
        new = Proposal(old.rate if rate is None else rate, old.burst if burst is None else burst)
        if new.empty:
            self.proposals.pop(key, None)
        else:
            self.proposals[key] = new

    def problems(self) -> dict[BucketKey, str]:
        """Each row whose proposal cannot be read, with the sentence saying why."""
        found: dict[BucketKey, str] = {}
        for row in self.rows:
            try:
                to_change(row, self.proposals.get(row.key, Proposal()))
            except ConfigError as exc:
                found[row.key] = exc.message
        return found

    def changes(self) -> tuple[LimitChange, ...]:
        """Every change proposed, in row order; raises ``ConfigError`` for the first proposal
        that cannot be read."""
        found = (to_change(row, self.proposals.get(row.key, Proposal())) for row in self.rows)
        return tuple(change for change in found if change is not None)

    def request(self, traffic: PlanTraffic, concurrency: int | None) -> PlanRequest:
        """The plan the inputs ask for now; raises ``ConfigError`` as ``changes`` does, or for
        a burst without tenants."""
        if isinstance(traffic, BurstTraffic) and not traffic.tenants:
            raise ConfigError("choose at least one tenant for the burst.")
        if isinstance(traffic, BurstTraffic) and not traffic.provider:
            raise ConfigError("choose a provider for the burst.")
        return PlanRequest(traffic, self.changes(), concurrency, tuple(self.rows))

    def planned(self, request: PlanRequest, report: PlanReport) -> None:
        self.shown = (request, report)

    def can_apply(self, now: PlanRequest | None) -> bool:
        """True when the plan on screen answered exactly ``now`` and proposes limits."""
        if self.shown is None or now is None:
            return False
        request, report = self.shown
        return request == now and bool(request.changes) and report.proposed is not None

    def discard(self) -> None:
        """Forget the proposals, and the proposed half of the plan on screen."""
        self.proposals.clear()
        if self.shown is not None:
            request, report = self.shown
            self.shown = (
                dataclasses.replace(request, changes=(), concurrency=None),
                dataclasses.replace(report, changes=(), proposed=None),
            )

    def clear(self) -> None:
        """Forget the proposals and the plan on screen (its limits were applied)."""
        self.proposals.clear()
        self.shown = None

    def __repr__(self) -> str:
        shown = "none" if self.shown is None else self.shown[1].traffic
        return f"WhatIf({len(self.rows)} rows, {len(self.proposals)} proposed, shown: {shown})"


# -- what to show ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Curve:
    """One tenant's predicted queue depth in one plan; ``colour`` indexes the series colours
    and is the same for a tenant in both plans."""

    tenant: str
    proposed: bool
    colour: int
    t_s: tuple[float, ...]
    queued: tuple[int, ...]


def curves(report: PlanReport) -> list[Curve]:
    """Each tenant's depth over time, by tenant: its current plan, then its proposed one."""
    names = _tenants(report)
    found: list[Curve] = []
    for proposed, result in ((False, report.current), (True, report.proposed)):
        for plan in () if result is None else result.tenants:
            t_s, queued = zip(*plan.depth, strict=True) if plan.depth else ((), ())
            found.append(Curve(plan.tenant, proposed, names.index(plan.tenant), t_s, queued))
    return sorted(found, key=lambda c: (c.colour, c.proposed))


@dataclass(frozen=True, slots=True)
class Cell:
    """A figure now and as proposed (None: nothing proposed), written once when the two read
    the same; ``trend`` is -1 when the proposal makes it better (lower), 1 worse, 0 the same
    or not comparable."""

    now: str
    proposed: str | None = None
    trend: int = 0

    def __str__(self) -> str:
        if self.proposed is None or self.proposed == self.now:
            return self.now
        return f"{self.now} → {self.proposed}"


@dataclass(frozen=True, slots=True)
class Comparison:
    tenant: str
    drain: Cell
    wait_p95: Cell
    most_queued: Cell
    paced_by: Cell


def compare(report: PlanReport) -> list[Comparison]:
    """One row per tenant of either plan: drain time, p95 wait, most queued, what paced it."""
    rows = []
    for name in _tenants(report):
        now = _find(report.current, name)
        new = None if report.proposed is None else _find(report.proposed, name)
        rows.append(
            Comparison(
                name,
                _cell(now, new, lambda t: t.drain_s, _drain),
                _cell(now, new, lambda t: t.wait_p95_s, fmt_latency),
                _cell(now, new, lambda t: t.max_queued, fmt_count),
                _cell(now, new, lambda t: t.paced_by, fmt_paced, ordered=False),
            )
        )
    return rows


def summary(report: PlanReport) -> str:
    """One or two sentences: what was planned and when everything drains in each plan."""
    if not report.current.notifications and report.proposed is None:
        return f"Nothing to plan: {report.traffic} holds no notifications."
    text = f"{report.traffic[0].upper()}{report.traffic[1:]}: with the current limits "
    text += _outcome(report.current)
    if report.proposed is not None:
        text += f"; with the proposed ones {_outcome(report.proposed)}"
    return text + "."


def fmt_paced(paced_by: str) -> str:
    """``tenant:acme`` as ``tenant acme``, ``pair:acme/sms`` as ``acme on sms``."""
    scope, _, name = paced_by.partition(":")
    if not name:
        return paced_by
    if scope == "pair":
        return name.replace("/", " on ", 1)
    return f"{scope} {name}"


def _outcome(result: PlanResult) -> str:
    drained = (
        f"everything drains in {fmt_duration(result.total_drain_s)}"
        if result.total_drain_s is not None
        else f"{result.unfinished:,} are still queued when the plan ends"
    )
    expired = sum(t.expired for t in result.tenants)
    if expired:  # past their deadline before they were sent
        drained += f", and {expired:,} of {result.notifications:,} expire unsent"
    return f"{drained} (concurrency {result.concurrency})"


def _drain(seconds: float | None) -> str:
    return "not drained" if seconds is None else fmt_duration(seconds)


def _tenants(report: PlanReport) -> list[str]:
    names = {t.tenant for t in report.current.tenants}
    if report.proposed is not None:
        names |= {t.tenant for t in report.proposed.tenants}
    return sorted(names)


def _find(result: PlanResult, name: str) -> TenantPlan | None:
    return next((t for t in result.tenants if t.tenant == name), None)


def _cell(
    now: TenantPlan | None,
    new: TenantPlan | None,
    value: Callable[[TenantPlan], V],
    show: Callable[[V], str],
    *,
    ordered: bool = True,
) -> Cell:
    before = None if now is None else value(now)
    text = "—" if now is None else show(value(now))
    if new is None:
        return Cell(text)
    after = value(new)
    trend = 0
    if ordered and now is not None:
        trend = (_rank(after) > _rank(before)) - (_rank(after) < _rank(before))
    return Cell(text, show(after), trend)


def _rank(value: object) -> float:
    """A figure for comparing: None (not drained, no wait known) counts as endless."""
    return float(value) if isinstance(value, int | float) else math.inf
