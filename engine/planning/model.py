"""What-if planning's values: the limit changes to try, the traffic to plan for, how each
provider answers in a plan, and what a plan found. Plain frozen values, safe to hand to the
console and to print as JSON; the planner that produces them is ``engine.planning.planner``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from engine.core.domain import BucketKey, Limit, check_limit
from engine.core.errors import ConfigError
from engine.planning.simulate import Pattern

__all__ = [
    "BacklogTraffic",
    "BurstTraffic",
    "LimitChange",
    "PlanReport",
    "PlanResult",
    "ProviderModel",
    "ProviderPlan",
    "ReplayTraffic",
    "TenantPlan",
    "Traffic",
]

_MAX_HOURS = 366 * 24
_CHANGE = re.compile(r"^(tenant|provider|pair):([^=]+)=(.*)$")
_SPELLING = (
    "write tenant:NAME=RATE[:BURST], provider:NAME=RATE[:BURST] or "
    "pair:TENANT/PROVIDER=RATE[:BURST] (RATE 'none' removes the limit)"
)


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One proposed limit: ``key``'s bucket gets ``limit`` (None: no limit). ``burst`` None
    means "keep the bucket's current burst" (one second's worth when it has none)."""

    key: BucketKey
    rate_per_s: float | None
    burst: float | None = None

    @classmethod
    def parse(cls, text: str) -> LimitChange:
        """Read ``tenant:NAME=RATE[:BURST]`` (or ``provider:``, ``pair:T/P``); raises
        ``ConfigError`` with one sentence naming what is wrong."""
        found = _CHANGE.match(text.strip())
        if found is None:
            raise ConfigError(f"{text!r} is not a limit change; {_SPELLING}.")
        scope, name, value = found.groups()
        name = name.strip()
        if scope == "pair":
            tenant, _, provider = name.partition("/")
            if not tenant.strip() or not provider.strip():
                raise ConfigError(f"{text!r}: a pair is named TENANT/PROVIDER.")
            key = BucketKey.for_pair(tenant.strip(), provider.strip())
        elif not name:
            raise ConfigError(f"{text!r} names no {scope}; {_SPELLING}.")
        elif scope == "tenant":
            key = BucketKey.for_tenant(name)
        else:
            key = BucketKey.for_provider(name)
        value = value.strip()
        if value.lower() in ("none", "off"):
            return cls(key, None)
        rate_text, _, burst_text = value.partition(":")
        rate = _number(text, rate_text, "rate")
        burst = _number(text, burst_text, "burst") if burst_text else None
        try:
            check_limit(rate, burst if burst is not None else max(1.0, rate))
        except ConfigError as exc:
            raise ConfigError(f"{text!r}: {exc.message}") from None
        return cls(key, rate, burst)

    def limit(self, current: Limit | None) -> Limit | None:
        """The limit this change leaves, given the bucket's ``current`` one."""
        if self.rate_per_s is None:
            return None
        if self.burst is not None:
            return Limit(self.rate_per_s, self.burst)
        burst = current.burst if current is not None else max(1.0, self.rate_per_s)
        return Limit(self.rate_per_s, burst)

    def __str__(self) -> str:
        if self.rate_per_s is None:
            return f"{self.key}=none"
        burst = f":{self.burst:g}" if self.burst is not None else ""
        return f"{self.key}={self.rate_per_s:g}{burst}"


def _number(change: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{change!r}: the {what} {text.strip()!r} is not a number.") from None
    if not math.isfinite(value):
        raise ConfigError(f"{change!r}: the {what} must be a finite number.")
    return value


# -- traffic -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BurstTraffic:
    """``count`` notifications for each of ``tenants`` through ``provider``, arriving on
    ``pattern`` over ``duration_s``: what the burst simulator enqueues."""

    tenants: tuple[str, ...]
    provider: str
    count: int
    pattern: Pattern = Pattern.SPIKE
    duration_s: float = 0.0
    ttl_s: float | None = None  # each never sent later than this after it arrives

    def __str__(self) -> str:
        spread = f" over {self.duration_s:g}s" if self.duration_s else ""
        ttl = f", each with a {self.ttl_s:g}s TTL" if self.ttl_s else ""
        return (
            f"a {self.pattern.value} of {self.count:,} each for {', '.join(self.tenants)} "
            f"through {self.provider}{spread}{ttl}"
        )


@dataclass(frozen=True, slots=True)
class BacklogTraffic:
    """What the store holds queued (and in flight) now, due at the start, and what it holds
    scheduled, due at its send time; each with what is left of its deadline."""

    def __str__(self) -> str:
        return "the store's current backlog"


@dataclass(frozen=True, slots=True)
class ReplayTraffic:
    """The enqueues of the last ``hours`` (at most a year), replayed from the first of them at
    ``speed`` times their pace."""

    hours: float
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.hours) or not 0 < self.hours <= _MAX_HOURS:
            raise ConfigError(
                f"replay hours must be above 0 and at most {_MAX_HOURS:,}, not {self.hours:g}."
            )
        if not math.isfinite(self.speed) or not 1e-3 <= self.speed <= 1e6:
            raise ConfigError(f"replay speed must be from 0.001 to 1000000, not {self.speed:g}.")

    def __str__(self) -> str:
        return f"the enqueues of the last {self.hours:g}h at {self.speed:g}x"


Traffic = BurstTraffic | BacklogTraffic | ReplayTraffic


# -- providers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderModel:
    """How a provider answers in a plan: a latency uniform over ``latency_ms ± jitter_ms`` and
    the chances of each failure, for a call of up to ``batch_max`` messages. ``source`` says
    where the figures come from."""

    latency_ms: float = 5.0
    jitter_ms: float = 0.0
    throttle_rate: float = 0.0
    error_rate: float = 0.0
    permanent_rate: float = 0.0
    retry_after_s: float = 1.0
    seed: int | None = None
    source: str = "assumed"
    batch_max: int = 1

    def as_json(self) -> dict[str, Any]:
        return {
            "latency_ms": round(self.latency_ms, 3),
            "jitter_ms": round(self.jitter_ms, 3),
            "throttle_rate": round(self.throttle_rate, 4),
            "error_rate": round(self.error_rate, 4),
            "permanent_rate": round(self.permanent_rate, 4),
            "batch_max": self.batch_max,
            "source": self.source,
        }


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantPlan:
    """One tenant in a plan. Times are seconds from the plan's start; ``drain_s`` is when its
    last notification was delivered or given up (None: not within the plan's horizon), waits
    run from enqueue to delivery. ``paced_by`` names what held it back most: a bucket
    (``tenant:acme``, ``provider:sms``, ``pair:acme/sms``), ``concurrency`` (every sender
    busy), ``arrivals`` (nothing held it: it went out as it came) or ``disabled``.
    ``depth`` is its queue (enqueued, not yet delivered or dead) over time."""

    tenant: str
    notifications: int
    delivered: int
    dead: int
    sends: int
    drain_s: float | None
    wait_p50_s: float | None
    wait_p95_s: float | None
    wait_p99_s: float | None
    max_queued: int
    paced_by: str
    depth: tuple[tuple[float, int], ...] = ()
    expired: int = 0  # past their deadline before they were sent

    def as_json(self) -> dict[str, Any]:
        return {
            "notifications": self.notifications,
            "delivered": self.delivered,
            "dead": self.dead,
            "expired": self.expired,
            "sends": self.sends,
            "drain_s": _r(self.drain_s),
            "wait_p50_s": _r(self.wait_p50_s),
            "wait_p95_s": _r(self.wait_p95_s),
            "wait_p99_s": _r(self.wait_p99_s),
            "max_queued": self.max_queued,
            "paced_by": self.paced_by,
        }


@dataclass(frozen=True, slots=True)
class ProviderPlan:
    """One provider in a plan: its sends, their pace while it was busy, and that pace as a
    share of its limit (None when it has none)."""

    provider: str
    sends: int
    rate_per_s: float
    limit: Limit | None
    utilisation: float | None
    model: ProviderModel

    def as_json(self) -> dict[str, Any]:
        return {
            "sends": self.sends,
            "rate_per_s": round(self.rate_per_s, 3),
            "limit": _limit(self.limit),
            "utilisation": _r(self.utilisation, 4),
            "model": self.model.as_json(),
        }


@dataclass(frozen=True, slots=True)
class PlanResult:
    """One plan: the limits and concurrency it ran with and what each tenant and provider saw.
    ``unfinished`` notifications were still queued when the horizon ended it."""

    concurrency: int
    limits: tuple[tuple[str, Limit], ...]
    tenants: tuple[TenantPlan, ...]
    providers: tuple[ProviderPlan, ...]
    total_drain_s: float | None
    notifications: int
    unfinished: int
    planned_in_s: float

    def tenant(self, name: str) -> TenantPlan:
        found = next((t for t in self.tenants if t.tenant == name), None)
        if found is None:
            raise KeyError(name)
        return found

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "limits": {key: _limit(limit) for key, limit in self.limits},
            "notifications": self.notifications,
            "total_drain_s": _r(self.total_drain_s),
            "unfinished": self.unfinished,
            "planned_in_s": round(self.planned_in_s, 3),
            "tenants": {t.tenant: t.as_json() for t in self.tenants},
            "providers": {p.provider: p.as_json() for p in self.providers},
        }


@dataclass(frozen=True, slots=True)
class PlanReport:
    """The plan with the limits in force (``current``) and, when changes were proposed, the
    plan with them (``proposed``), for the same traffic."""

    traffic: str
    changes: tuple[LimitChange, ...]
    current: PlanResult
    proposed: PlanResult | None

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "traffic": self.traffic,
            "changes": [str(c) for c in self.changes],
            "current": self.current.as_json(),
        }
        if self.proposed is not None:
            found["proposed"] = self.proposed.as_json()
        return found


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _limit(limit: Limit | None) -> dict[str, float] | None:
    return None if limit is None else {"rate_per_s": limit.rate_per_s, "burst": limit.burst}
