"""Snapshot assembly from given figures: the queue per tenant from the store's depth rows, and
the rest of a snapshot from telemetry on a fake clock. No store, no engine."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.clock import FakeClock
from engine.core.domain import BucketKey, BucketLevel, NotificationState, Outcome
from engine.facade.engine import EngineState
from engine.store.records import DepthRow
from engine.telemetry.figures import Counters, Telemetry, TenantDepth, build_snapshot, tenant_depths

Q, L, D, X = (
    NotificationState.QUEUED,
    NotificationState.LEASED,
    NotificationState.DELIVERED,
    NotificationState.DEAD,
)
NOW = 5_000.0
NAMES = {1: "acme", 2: "globex"}

# (rows as (tenant id, state, count, oldest enqueued at), expected depths)
DEPTHS: list[tuple[list[tuple[int, NotificationState, int, float | None]], list[TenantDepth]]] = [
    ([], []),
    (
        [(1, Q, 4, NOW - 7.5), (1, L, 2, None), (1, D, 10, None), (1, X, 1, None)],
        [TenantDepth("acme", 4, 2, 10, 1, 7.5)],
    ),
    ([(1, D, 3, None)], [TenantDepth("acme", 0, 0, 3, 0, None)]),  # missing states count 0
    ([(1, Q, 1, NOW + 3.0)], [TenantDepth("acme", 1, 0, 0, 0, 0.0)]),  # a clock ahead: age 0
    ([(1, Q, 1, None)], [TenantDepth("acme", 1, 0, 0, 0, None)]),
    ([(1, L, 1, NOW - 9.0)], [TenantDepth("acme", 0, 1, 0, 0, None)]),  # only queued ones age
    ([(9, X, 2, None)], [TenantDepth("9", 0, 0, 0, 2, None)]),  # no name known: its id
    (  # in tenant id order, whatever the rows' order
        [(2, Q, 1, NOW - 1.0), (1, L, 5, None), (2, X, 3, None)],
        [TenantDepth("acme", 0, 5, 0, 0, None), TenantDepth("globex", 1, 0, 0, 3, 1.0)],
    ),
]


@pytest.mark.parametrize(("rows", "expected"), DEPTHS)
def test_tenant_depths(
    rows: list[tuple[int, NotificationState, int, float | None]], expected: list[TenantDepth]
) -> None:
    depth_rows = [DepthRow(*row) for row in rows]
    assert tenant_depths(depth_rows, NAMES, NOW) == tuple(expected)


def test_a_snapshot_is_built_from_what_it_is_given() -> None:
    clock = FakeClock(start=100.0)
    telemetry = Telemetry(clock)
    for latency_s in (0.1, 0.2, 0.3, 0.4):
        telemetry.record(Outcome.DELIVERED, latency_s=latency_s)
    telemetry.record(Outcome.THROTTLED)
    telemetry.record(Outcome.PERMANENT, dead=True)
    telemetry.loop_lag_s = 0.002
    clock.advance(1.0)  # the second of those outcomes is complete: it counts in the rates
    level = BucketLevel(BucketKey.for_tenant("acme"), tokens=3.0, burst=5.0, rate_per_s=2.0)

    snap = build_snapshot(
        now=NOW,
        depth_rows=[DepthRow(1, Q, 2, NOW - 4.0)],
        tenant_names=NAMES,
        telemetry=telemetry,
        buckets=iter([level]),
        state=EngineState.RUNNING,
        worker_id="w1",
        concurrency=16,
        inflight=3,
        limiter_backend="local",
        workers=iter(["w1", "w2"]),
        failure=None,
    )

    assert snap.ts == NOW
    assert (snap.state, snap.worker_id, snap.concurrency, snap.inflight) == (
        "running",
        "w1",
        16,
        3,
    )
    assert snap.limiter_backend == "local"
    assert snap.buckets == (level,)
    assert snap.depth == (TenantDepth("acme", 2, 0, 0, 0, 4.0),)
    assert snap.totals == Counters(delivered=4, throttled=1, dead=1)
    rates = (snap.delivered_per_s, snap.throttled_per_s, snap.failed_per_s)
    assert rates == pytest.approx((4 / 5, 1 / 5, 1 / 5))
    assert (snap.latency_p50_s, snap.latency_p95_s, snap.latency_p99_s) == (0.2, 0.4, 0.4)
    assert snap.loop_lag_s == 0.002
    assert snap.workers == ("w1", "w2")
    assert snap.failure is None


def test_a_failed_engine_says_why_and_lists_no_workers_unless_asked() -> None:
    snap = build_snapshot(
        now=NOW,
        depth_rows=[],
        tenant_names={},
        telemetry=Telemetry(FakeClock()),
        buckets=[],
        state=EngineState.FAILED,
        worker_id="w1",
        concurrency=1,
        inflight=0,
        limiter_backend="redis",
        failure="omnipost-reap stopped: disk on fire",
    )
    assert snap.failure == "omnipost-reap stopped: disk on fire"
    assert snap.workers == ()
    assert snap.depth == ()
    assert (snap.latency_p50_s, snap.latency_p95_s, snap.latency_p99_s) == (None, None, None)


@pytest.mark.parametrize("state", list(EngineState))
def test_engine_states_are_their_strings(state: EngineState) -> None:
    assert state == state.value
    assert f"{state}" == state.value
    snap = build_snapshot(
        now=NOW,
        depth_rows=[],
        tenant_names={},
        telemetry=Telemetry(FakeClock()),
        buckets=[],
        state=state,
        worker_id="w1",
        concurrency=1,
        inflight=0,
        limiter_backend="local",
    )
    assert json.loads(json.dumps(dataclasses.asdict(snap)))["state"] == state.value


def test_engine_state_values() -> None:
    assert [s.value for s in EngineState] == [
        "idle",
        "running",
        "paused",
        "stopping",
        "stopped",
        "failed",
    ]
