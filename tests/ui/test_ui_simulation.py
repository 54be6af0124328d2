"""The burst simulator's bookkeeping without Qt: the drain forecast, and a burst's status from
its first enqueue to its drain, at fixed instants."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from engine import BucketKey, Limit, OmniPostError, Pattern, TenantDepth
from ui.simulation import BurstTracker, SimulationStatus, predict_drain

SMS = "sms"
BOTH = ["acme", "globex"]
ACME, GLOBEX = BucketKey.for_tenant("acme"), BucketKey.for_tenant("globex")
PROVIDER, EMAIL = BucketKey.for_provider(SMS), BucketKey.for_provider("email")
PAIR = BucketKey.for_pair("acme", SMS)


def depth(tenant: str, queued: int = 0, leased: int = 0) -> TenantDepth:
    return TenantDepth(tenant, queued, leased, delivered=0, dead=0, oldest_queued_age_s=None)


@pytest.mark.parametrize(
    ("tenants", "count", "arrival_s", "limits", "seconds", "bottleneck"),
    [
        # the slowest tenant sets the pace: (100 - 5) / 10
        (BOTH, 100, 0.0, {ACME: Limit(50, 20), GLOBEX: Limit(10, 5), PROVIDER: Limit(100, 50)},
         9.5, "tenant globex at 10/s"),
        # the provider carries every tenant's share: (200 - 10) / 10
        (BOTH, 100, 0.0, {PROVIDER: Limit(10, 10)}, 19.0, "provider sms at 10/s"),
        (["acme"], 20, 0.0, {PAIR: Limit(5, 5)}, 3.0, "pair acme/sms at 5/s"),
        (["acme"], 20, 0.0, {EMAIL: Limit(1, 1), GLOBEX: Limit(1, 1)}, 0.0, "nothing: no limits"),
        (["acme"], 10, 4.0, {}, 4.0, "arrivals"),  # unlimited: the arrivals
        (["acme"], 10, 4.0, {ACME: Limit(100, 1)}, 4.0, "arrivals"),  # the bucket keeps up
        (["acme"], 5, 0.0, {ACME: Limit(1, 5)}, 0.0, "nothing: no limits"),  # within the burst
    ],
)  # fmt: skip
def test_predict_drain_names_the_slowest_bucket(
    tenants: Sequence[str],
    count: int,
    arrival_s: float,
    limits: Mapping[BucketKey, Limit],
    seconds: float,
    bottleneck: str,
) -> None:
    forecast = predict_drain(tenants, SMS, count, arrival_s, limits)
    assert forecast.seconds == pytest.approx(seconds)
    assert forecast.bottleneck == bottleneck


def begin(
    tracker: BurstTracker,
    tenants: Sequence[str] = ("acme", "globex"),
    *,
    pattern: Pattern | str = Pattern.SPIKE,
    duration_s: float = 0.0,
    limits: Mapping[BucketKey, Limit] | None = None,
    now_s: float = 100.0,
) -> SimulationStatus:
    return tracker.begin(
        tenants,
        SMS,
        50,
        pattern=pattern,
        duration_s=duration_s,
        limits={GLOBEX: Limit(10, 5)} if limits is None else limits,
        now_s=now_s,
    )


def test_a_burst_runs_from_its_first_enqueue_to_its_drain() -> None:
    tracker = BurstTracker()
    started = begin(tracker, now_s=100.0)
    assert (started.tenants, started.provider, started.total) == (("acme", "globex"), SMS, 100)
    assert started.enqueuing and not started.done and started.enqueued == 0
    assert started.forecast is not None and started.forecast.seconds == pytest.approx(4.5)

    assert tracker.progress(40, 1.5) == SimulationStatus(
        ("acme", "globex"), SMS, 100, enqueued=40, elapsed_s=1.5, forecast=started.forecast
    )
    waiting = tracker.observe(1000.0, [depth("acme", queued=30), depth("globex", leased=10)], 102)
    assert waiting is not None and waiting.elapsed_s == 2.0 and waiting.actual_s is None

    written = tracker.enqueued(wall_s=1001.0)
    assert written is not None and written.enqueued == 100 and not written.enqueuing
    drained = tracker.observe(1001.0, [depth("acme"), depth("globex")], now_s=103.5)
    assert drained is not None and drained.done and drained.actual_s == drained.elapsed_s == 3.5
    assert tracker.observe(1002.0, [], now_s=104.0) is None  # done: nothing more to show
    assert tracker.status is drained


@pytest.mark.parametrize(
    ("written", "depths", "ts", "actual_s"),
    [
        (False, [], 2000.0, None),  # still enqueueing: the queue may be empty for a moment
        (True, [depth("acme", queued=2)], 2000.0, None),
        (True, [depth("globex", leased=1)], 2000.0, None),  # a send under way still counts
        (True, [], 999.0, None),  # a snapshot from before the last enqueue knows nothing
        (True, [], 1000.0, 3.0),
        (True, [depth("acme"), depth("globex")], 1000.0, 3.0),
        (True, [depth("initech", queued=9)], 1000.0, 3.0),  # another tenant's queue
    ],
)
def test_a_burst_drained_once_a_later_snapshot_shows_nothing_of_it_waiting(
    written: bool, depths: list[TenantDepth], ts: float, actual_s: float | None
) -> None:
    tracker = BurstTracker()
    begin(tracker, now_s=100.0)
    if written:
        tracker.enqueued(wall_s=1000.0)
    status = tracker.observe(ts, depths, now_s=103.0)
    assert status is not None
    assert (status.elapsed_s, status.actual_s) == (3.0, actual_s)


def test_a_stopped_burst_is_done_and_shows_no_more() -> None:
    tracker = BurstTracker()
    begin(tracker)
    tracker.progress(10, 0.5)
    stopped = tracker.stopped()
    assert stopped is not None and stopped.done and stopped.stopped and not stopped.enqueuing
    assert stopped.enqueued == 10 and stopped.actual_s is None
    assert tracker.observe(2000.0, [], now_s=200.0) is None


def test_a_new_burst_forgets_when_the_last_one_was_written() -> None:
    tracker = BurstTracker()
    begin(tracker, now_s=100.0)
    tracker.enqueued(wall_s=1000.0)
    begin(tracker, now_s=200.0)
    tracker.enqueued(wall_s=3000.0)
    status = tracker.observe(2000.0, [], now_s=201.0)  # after the first burst's writes only
    assert status is not None and status.actual_s is None and status.elapsed_s == 1.0


@pytest.mark.parametrize(
    ("pattern", "duration_s", "seconds", "bottleneck"),
    [
        (Pattern.SPIKE, 30.0, 4.5, "tenant globex at 10/s"),  # a spike arrives at once
        (Pattern.STEADY, 30.0, 30.0, "arrivals"),
        ("ramp", 2.0, 4.5, "tenant globex at 10/s"),
        ("poisson", 0.0, 4.5, "tenant globex at 10/s"),
    ],
)
def test_the_forecast_counts_the_arrivals_of_spread_patterns(
    pattern: Pattern | str, duration_s: float, seconds: float, bottleneck: str
) -> None:
    status = begin(BurstTracker(), pattern=pattern, duration_s=duration_s)
    assert status.forecast is not None
    assert (status.forecast.seconds, status.forecast.bottleneck) == (seconds, bottleneck)


def test_a_burst_needs_a_tenant_and_a_known_pattern() -> None:
    tracker = BurstTracker()
    with pytest.raises(OmniPostError, match="at least one tenant"):
        begin(tracker, tenants=())
    with pytest.raises(ValueError):
        begin(tracker, pattern="sawtooth")
    assert tracker.status is None


@pytest.mark.parametrize(
    "event",
    [
        lambda t: t.progress(1, 0.1),
        lambda t: t.enqueued(wall_s=1.0),
        lambda t: t.stopped(),
        lambda t: t.observe(1.0, [], now_s=1.0),
    ],
    ids=["progress", "enqueued", "stopped", "observe"],
)
def test_without_a_burst_there_is_nothing_to_show(
    event: Callable[[BurstTracker], SimulationStatus | None],
) -> None:
    tracker = BurstTracker()
    assert event(tracker) is None
    assert tracker.status is None and repr(tracker) == "BurstTracker(None)"
