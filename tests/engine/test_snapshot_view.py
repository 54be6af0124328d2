"""A view's snapshot (``Engine.snapshot(view=...)``): its cost follows what is shown, and it
picks the right buckets and tenants.

At 200 and at 2,000 tenants (three providers, a pair limit each: 8,003 buckets at 2,000) the
snapshot reads the same number of statements and a bounded number of bucket levels; the old
snapshot read every level and probed every tenant with queued work.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    BucketKey,
    BucketLevel,
    Engine,
    Limit,
    LocalLimiter,
    NotificationState,
    SecretBox,
    SnapshotView,
    Store,
    SystemClock,
)
from engine.telemetry.activity import Activity
from engine.telemetry.snapshots import RECENT_PAIRS, candidates, fill_counts, pick_buckets
from testkit.counting import CountingLimiter, Statements, populated_engine
from testkit.many_tenants import PROVIDERS, populate, tenant_name


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[dict[int, tuple[Engine, CountingLimiter]]]:
    made = {n: await populated_engine(tmp_path, n) for n in (200, 2000)}
    yield {n: (e, lim) for n, (e, lim, _s) in made.items()}
    for engine, _limiter, store in made.values():
        await engine.close()
        await store.close()


async def _drain_some(engine: Engine, tenants: Sequence[int]) -> None:
    """Take tokens from some tenants' buckets as sends would, and tell the telemetry when
    (each at its own time: a take stamped earlier than it was made may be counted full while
    it still refills, when taking them all lasts longer than a bucket's refill)."""
    for i in tenants:
        keys = BucketKey.for_send(tenant_name(i), PROVIDERS[0])
        await engine.limiter.reserve(keys, 1 + i % 3)
        engine.telemetry.activity.touch(tenant_name(i), PROVIDERS[0], engine.clock.monotonic())


async def test_a_views_snapshot_costs_the_same_at_200_and_2000_tenants(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    view = SnapshotView(tenants=tuple(tenant_name(i) for i in range(30)), totals_first=True)
    statements: dict[int, int] = {}
    levels: dict[int, int] = {}
    for n, (engine, limiter) in engines.items():
        await _drain_some(engine, range(0, n, max(1, n // 150)))
        counter = Statements(engine.store)
        await engine.snapshot(view=view)  # the first reads the totals,
        await engine.snapshot(view=view)  # the next the whole overview
        counter.count, limiter.levels_read = 0, 0
        snap = await engine.snapshot(view=view)
        statements[n], levels[n] = counter.count, limiter.levels_read
        assert snap.queue is not None and snap.queue.queued == n * 2
        assert snap.picks is not None and snap.picks.configured == n * 4 + 3
        assert len(snap.picks.emptiest) == view.emptiest
        assert len(snap.buckets) <= view.emptiest + view.busiest + len(view.tenants)
        assert {d.tenant for d in snap.depth} >= set(view.tenants)
    assert statements[2000] == statements[200] <= 4, statements
    assert levels[2000] <= 3 * RECENT_PAIRS + 64, levels  # the recent pairs' buckets, and more


async def test_a_views_first_snapshot_reads_the_totals_and_the_next_the_deepest(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    """A console opening on many tenants shows its figures at once: its first snapshot sums
    the states only; the deepest tenants come with the next one, and stay for
    ``totals_every_s``."""
    engine, _limiter = engines[2000]
    view = SnapshotView(deepest=5, totals_first=True)
    first = await engine.snapshot(view=view)
    assert first.queue is not None and first.queue.queued == 2000 * 2
    assert first.queue.tenants_queued is None and first.deepest == ()
    second = await engine.snapshot(view=view)
    assert second.queue is not None and second.queue.tenants_queued == 2000
    assert len(second.deepest) == 5


async def test_the_distribution_of_fills_counts_every_bucket_reading_the_recent_ones(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    engine, limiter = engines[2000]
    drained = range(0, 2000, 4)  # 500 pairs: each tenant's and pair's bucket taken from
    await _drain_some(engine, drained)
    before = fill_counts(await limiter.inner.levels(), 10, 8003)  # every level: the truth
    limiter.levels_read = 0
    snap = await engine.snapshot(view=SnapshotView(fill_bins=10))
    after = fill_counts(await limiter.inner.levels(), 10, 8003)

    picks = snap.picks
    assert picks is not None and len(picks.fills) == 10
    assert sum(picks.fills) == picks.configured == 8003
    # The tenant's and the pair's of each and a provider's, those not full again by now.
    assert 0 < picks.fills_read <= 1001
    assert limiter.levels_read < 1001 + 3 * RECENT_PAIRS  # the picks' too; not the 8,003
    assert sum(before[:-1]) > 100  # buckets well below full: what the distribution shows
    # Buckets only refill meanwhile: as many at most so full as before, at least as after.
    cumulative = [list(itertools.accumulate(c)) for c in (before, picks.fills, after)]
    assert all(b >= s >= a for b, s, a in zip(*cumulative, strict=True)), cumulative
    assert not (await engine.snapshot(view=SnapshotView())).picks.fills  # type: ignore[union-attr]


@pytest.mark.slow
async def test_the_full_snapshot_still_reads_every_tenant(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    engine, limiter = engines[2000]
    snap = await engine.snapshot()
    assert len(snap.depth) == 2000 and len(snap.buckets) == 8003
    assert limiter.levels_read == 8003
    assert snap.queue is not None and snap.queue.queued == 4000


async def test_the_totals_are_read_at_their_cadence(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    engine, _limiter = engines[200]
    slow = SnapshotView(totals_every_s=3600)
    first = await engine.snapshot(view=slow)
    await engine.enqueue(tenant_name(0), PROVIDERS[0], "b@example.com", {"n": 1})
    again = await engine.snapshot(view=slow)
    assert first.queue is not None and again.queue is not None
    assert again.queue.queued == first.queue.queued  # not read again yet
    fresh = await engine.snapshot(view=SnapshotView(totals_every_s=0))
    assert fresh.queue is not None and fresh.queue.queued == first.queue.queued + 1
    # the tenants shown are read every time, totals or not
    named = await engine.snapshot(view=SnapshotView(tenants=(tenant_name(0),)))
    assert [d.queued for d in named.depth if d.tenant == tenant_name(0)] == [3]


async def test_the_name_filter_shows_matching_buckets_and_counts_them_all(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    engine, _limiter = engines[2000]
    snap = await engine.snapshot(view=SnapshotView(match="T0012", matched=5))
    assert snap.picks is not None
    # t00120..t00129: 10 tenants with a bucket each and three pairs (not t00012)
    assert snap.picks.matching_total == 10 * 4
    assert len(snap.picks.matching) == 5
    assert all("t0012" in str(p.level.key) for p in snap.picks.matching)
    providers = await engine.snapshot(view=SnapshotView(match="provider:"))
    assert providers.picks is not None
    assert {str(p.level.key) for p in providers.picks.matching} == {
        f"provider:{p}" for p in PROVIDERS
    }


def _level(name: str, tokens: float, burst: float = 10, blocked_s: float = 0.0) -> BucketLevel:
    return BucketLevel(BucketKey.for_tenant(name), tokens, burst, 5.0, blocked_s)


@pytest.mark.parametrize(
    ("levels", "rates", "emptiest", "busiest"),
    [
        pytest.param([], {}, [], [], id="nothing"),
        pytest.param(
            [_level("a", 10), _level("b", 9.995)], {}, [], [], id="full ones are not emptiest"
        ),
        pytest.param(
            [_level("a", 5), _level("b", 1), _level("c", 3), _level("d", 0.5)],
            {},
            ["d", "b"],
            [],
            id="lowest fill first",
        ),
        pytest.param(
            [_level("a", 1, burst=100), _level("b", 1, burst=2)],
            {},
            ["a", "b"],
            [],
            id="by fill, not tokens",
        ),
        pytest.param(
            [_level("a", 0), _level("b", 10, blocked_s=3)],
            {},
            ["b", "a"],
            [],
            id="blocked first",
        ),
        pytest.param([_level("a", 0), _level("b", 0)], {}, ["a", "b"], [], id="ties by name"),
        pytest.param(
            [_level("a", 10), _level("b", 10), _level("c", 10)],
            {"a": 1.0, "b": 7.0, "c": 3.0, "zz": 99.0},
            [],
            ["b", "c"],
            id="busiest by rate, only buckets read",
        ),
        pytest.param(
            [_level("a", 10), _level("b", 10)],
            {"a": 0.0, "b": 2.0},
            [],
            ["b"],
            id="no rate, not busy",
        ),
    ],
)
def test_pick_buckets(
    levels: list[BucketLevel],
    rates: dict[str, float],
    emptiest: list[str],
    busiest: list[str],
) -> None:
    by_key = {BucketKey.for_tenant(name): rate for name, rate in rates.items()}
    picks = pick_buckets(levels, by_key, SnapshotView(emptiest=2, busiest=2))
    assert [p.level.key.tenant for p in picks.emptiest] == emptiest
    assert [p.level.key.tenant for p in picks.busiest] == busiest


def test_fill_counts_put_blocked_in_the_first_step_and_the_unread_in_the_last() -> None:
    levels = [
        _level("empty", 0.0),
        _level("half", 5.0),
        _level("full", 10.0),
        _level("held", 10.0, blocked_s=3.0),
    ]
    assert fill_counts(levels, 4, configured=10) == (2, 0, 1, 7)
    assert fill_counts([], 3, configured=5) == (0, 0, 5)


def test_candidates_are_the_buckets_of_recent_pairs_not_yet_refilled() -> None:
    activity = Activity(capacity=4)
    limits = {
        BucketKey.for_tenant("slow"): Limit(1, 10),  # refills in 10 s
        BucketKey.for_tenant("fast"): Limit(10, 1),  # in 0.1 s
        BucketKey.for_provider("p"): Limit(100, 100),  # in 1 s
    }
    activity.touch("slow", "p", 100.0)
    activity.touch("fast", "p", 100.0)
    assert candidates(activity, limits, 100.05) == set(limits)
    assert candidates(activity, limits, 100.5) == {
        BucketKey.for_tenant("slow"),
        BucketKey.for_provider("p"),
    }
    assert candidates(activity, limits, 120.0) == set()
    assert candidates(activity, limits, 100.05, recent=1) == {
        BucketKey.for_tenant("fast"),
        BucketKey.for_provider("p"),
    }


def test_activity_is_bounded_and_keeps_who_sends_often() -> None:
    activity = Activity(capacity=3, tau_s=1.0)
    t = 0.0
    for i in range(100):
        t += 0.01
        activity.touch("busy", "p", t)
        activity.touch(f"once{i}", "p", t)
    assert len(activity) == 3
    rates = activity.rates(t)
    assert rates[BucketKey.for_tenant("busy")] > 30  # ~63 sends in the last second
    assert BucketKey.for_tenant("once0") not in rates
    assert rates[BucketKey.for_provider("p")] > rates[BucketKey.for_tenant("busy")]


async def test_newest_notifications_across_tenants(
    engines: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    engine, _limiter = engines[200]
    queued = await engine.notifications_newest(NotificationState.QUEUED, limit=30)
    assert len(queued) == 30
    assert [v.id for v in queued] == sorted((v.id for v in queued), reverse=True)
    assert await engine.notifications_newest(NotificationState.DEAD) == []
    token = await engine.config_token()
    await engine.tenant_update(tenant_name(3), limit=Limit(9, 9))
    assert await engine.config_token() != token
    t0 = time.perf_counter()
    assert await engine.deliveries_after(0) == []
    assert time.perf_counter() - t0 < 1


async def test_the_overview_reads_on_each_store(
    store: Store, store_url: str, box: SecretBox
) -> None:
    """The new reads on SQLite and Postgres: depth of named tenants, the overview, the
    newest notifications across tenants, the newest deliveries, the configuration's token."""
    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS)
    await engine.open()
    try:
        await populate(engine, store_url, 30, queued=3, token=box.encrypt("a@example.com"))
        ids = {t.name: t.id for t in await engine.tenants()}
        rows = await store.overview.depth_of([ids[tenant_name(1)], ids[tenant_name(2)]])
        assert {(r.tenant_id, r.state, r.count) for r in rows} == {
            (ids[tenant_name(i)], NotificationState.QUEUED, 3) for i in (1, 2)
        }
        assert all(r.oldest_enqueued_at is not None for r in rows)
        overview = await store.overview.overview(5)
        assert overview.totals[NotificationState.QUEUED] == 90
        assert overview.tenants_queued == 30 and len(overview.deepest) == 5
        assert overview.oldest_enqueued_at is not None
        newest = await engine.notifications_newest(None, limit=7)
        assert len(newest) == 7 and all(v.state is NotificationState.QUEUED for v in newest)
        assert await engine.notifications_newest(NotificationState.LEASED) == []
        assert await engine.deliveries_after(0) == []
        token = await engine.config_token()
        assert token[1:] == (30, 3, 90)
    finally:
        await engine.close()
