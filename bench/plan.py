"""What-if planning speed: ``engine.planning.planner.run_plan`` on a spike, against the drain
it predicts.

The issue's target: planning 100,000 notifications over 20 buckets takes at most 5 s on this
machine, and at least 100 times less than the drain it predicts. The scenario: 19 tenants with
limits of 2, 3, ..., 20 per second (burst 10 each) and one simulated provider limited to 150 per
second (burst 50) that answers in 20 ms ± 10 ms, all delivered; the engine's dispatcher settings
at concurrency 16 and its attempt budget; a spike (everything enqueued at t=0) of COUNT
notifications spread evenly over the 19 tenants. The provider's model is built from its options
as ``Engine.plan`` builds it. Nothing touches a store: this is the planner alone.

Each size (10,000 and COUNT) is planned ``--repeat`` times in this process, smaller first. Per
size: wall time (``time.perf_counter``) and CPU time (``time.process_time``) of ``run_plan``
(median, min, max), the predicted drain (``total_drain_s``, the same each repeat: the plan is
seeded), predicted drain over the median wall time, notifications planned per second, and the
process's peak RSS so far. The 1-minute load average at start and end shows how busy the
machine was. ``meets_target`` and ``meets_100x`` judge the 100,000 size only (null otherwise).
``--quick`` plans 2,000 and 10,000 once, to check the script. ``--tenants N`` spreads the
same traffic over N tenants instead of 19 (their rates 2, 3, ..., 20 again, in turn): the
planner's cost per send at many tenants, against the 19 of the usual scenario. Prints JSON.
Usage::

    .venv/bin/python bench/plan.py [--count 100000] [--repeat 3] [--tenants 19] [--quick]
        [--out FILE]
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import time
from typing import Any

from _common import emit, parser, spread

from engine import EngineSettings, Limit, PlanResult
from engine.facade.plans import provider_model
from engine.planning.planner import Arrival, PlanSetup, run_plan
from engine.store import ProviderRecord, TenantRecord

TARGET_COUNT = 100_000
TARGET_S = 5.0
TARGET_RATIO = 100.0
SMALL = 10_000
QUICK_SIZES = (2_000, 10_000)
TENANT_RATES = tuple(float(r) for r in range(2, 21))  # 19 tenants
TENANT_BURST = 10.0
PROVIDER = Limit(150.0, 50.0)
PROVIDER_OPTIONS = {"latency_ms": "20", "latency_jitter_ms": "10"}
CONCURRENCY = 16


def scenario(tenant_count: int = len(TENANT_RATES)) -> PlanSetup:
    """The 20 buckets (or ``tenant_count`` tenants' and the provider's), the simulated
    provider and the engine's default settings."""
    rates = TENANT_RATES
    tenants = tuple(
        TenantRecord(i + 1, f"t{i + 1:05d}", Limit(rates[i % len(rates)], TENANT_BURST), True)
        for i in range(tenant_count)
    )
    provider = ProviderRecord(1, "sim", "simulated", PROVIDER, dict(PROVIDER_OPTIONS), ())
    settings = EngineSettings()
    return PlanSetup(
        tenants=tenants,
        providers=(provider,),
        pairs=(),
        models={provider.name: provider_model(provider, [])},
        dispatch=dataclasses.replace(settings.dispatch, concurrency=CONCURRENCY),
        max_attempts=settings.max_attempts,
    )


def spike(setup: PlanSetup, count: int) -> list[Arrival]:
    """``count`` notifications at t=0, spread evenly: the first ``count % 19`` tenants get one
    more than the others."""
    share, extra = divmod(count, len(setup.tenants))
    provider_id = setup.providers[0].id
    return [
        Arrival(0.0, t.id, provider_id, share + (1 if i < extra else 0))
        for i, t in enumerate(setup.tenants)
    ]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def predicted_drain_s(result: PlanResult, count: int) -> float:
    """The plan's drain; raises SystemExit if it did not plan all ``count`` to the end."""
    if result.notifications != count or result.total_drain_s is None:
        raise SystemExit(
            f"the plan of {count:,} covered {result.notifications:,} and left"
            f" {result.unfinished:,} unfinished at its horizon."
        )
    return result.total_drain_s


def measure(setup: PlanSetup, count: int, repeat: int) -> dict[str, Any]:
    arrivals = spike(setup, count)
    walls, cpus, drains = [], [], []
    for _ in range(repeat):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = run_plan(setup, arrivals)
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
        drains.append(predicted_drain_s(result, count))
    wall_s = statistics.median(walls)
    drain_s = drains[-1]
    return {
        "count": count,
        "wall_s": spread(walls, 3),
        "cpu_s": spread(cpus, 3),
        "predicted_drain_s": round(drain_s, 2),
        "same_drain_every_repeat": len(set(drains)) == 1,
        "predicted_provider_rate_per_s": round(result.providers[0].rate_per_s, 1),
        "drain_over_wall": round(drain_s / wall_s, 1),
        "planned_per_s": round(count / wall_s),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def verdict(largest: dict[str, Any]) -> dict[str, Any]:
    """The issue's two targets, judged on the 100,000 size (null when it was not planned)."""
    judged = largest["count"] == TARGET_COUNT
    return {
        "target_count": TARGET_COUNT,
        "target_s": TARGET_S,
        "target_ratio": TARGET_RATIO,
        "meets_target": largest["wall_s"]["median"] <= TARGET_S if judged else None,
        "meets_100x": largest["drain_over_wall"] >= TARGET_RATIO if judged else None,
    }


def sizes_and_repeat(count: int | None, repeat: int | None, quick: bool) -> tuple[list[int], int]:
    """The sizes to plan (ascending) and the repeats; raises SystemExit for bad options."""
    tenants = len(TENANT_RATES)
    if quick:
        if count is not None or repeat is not None:
            raise SystemExit("--quick sets its own sizes and repeats; leave out --count/--repeat.")
        return list(QUICK_SIZES), 1
    count = TARGET_COUNT if count is None else count
    repeat = 3 if repeat is None else repeat
    if count < tenants:
        raise SystemExit(f"--count must be at least {tenants} (one per tenant), not {count}.")
    if repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, not {repeat}.")
    return sorted({min(SMALL, count), count}), repeat


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--count", type=int, help=f"the larger size (default {TARGET_COUNT:,})")
    p.add_argument("--repeat", type=int, help="plans per size (default 3)")
    p.add_argument("--quick", action="store_true", help="2,000 and 10,000, once each")
    p.add_argument("--tenants", type=int, default=len(TENANT_RATES), help="default 19")
    args = p.parse_args()
    if args.tenants < 1:
        raise SystemExit(f"--tenants must be at least 1, not {args.tenants}.")
    sizes, repeat = sizes_and_repeat(args.count, args.repeat, args.quick)
    setup = scenario(args.tenants)
    load_start = os.getloadavg()[0]
    runs = [measure(setup, count, repeat) for count in sizes]
    load_end = os.getloadavg()[0]
    model = setup.models["sim"]
    report = {
        "bench": "plan",
        "scenario": {
            "buckets": len(setup.tenants) + len(setup.providers),
            "tenants": {"count": len(setup.tenants), "rates_per_s": "2, 3, ..., 20"},
            "tenant_burst": TENANT_BURST,
            "provider": {
                "rate_per_s": PROVIDER.rate_per_s,
                "burst": PROVIDER.burst,
                "latency_ms": model.latency_ms,
                "jitter_ms": model.jitter_ms,
            },
            "concurrency": CONCURRENCY,
            "max_attempts": setup.max_attempts,
            "traffic": "spike at t=0, spread evenly over the tenants",
        },
        "repeat": repeat,
        "load_avg_1m": {"start": round(load_start, 2), "end": round(load_end, 2)},
        "sizes": runs,
        **verdict(runs[-1]),
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
