"""A worker's progress line (and the last line of ``omnipost worker``) reads a brief snapshot
(``BRIEF_VIEW``): the same statements and a bounded number of bucket levels at 100 and at
10,000 tenants. The full snapshot it took before built a query per tenant and sorted every
bucket: at 10,000 tenants that cost more than the dispatch itself."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.metrics import METRICS_VIEW
from app.progress import FINAL_VIEW, summary_line
from engine import (
    BRIEF_VIEW,
    BUILTIN_KINDS,
    BucketKey,
    Engine,
    FakeClock,
    LocalLimiter,
    SecretBox,
    Store,
)
from engine.store.overview import QueueOverview
from engine.telemetry.snapshots import RECENT_PAIRS
from testkit.counting import CountingLimiter, Statements, populated_engine
from testkit.many_tenants import PROVIDERS, tenant_name

SIZES = (100, 10_000)


@pytest.fixture
async def sized(tmp_path: Path) -> AsyncIterator[dict[int, tuple[Engine, CountingLimiter]]]:
    made: list[tuple[Engine, CountingLimiter, Store]] = []
    try:
        for n in SIZES:
            made.append(await populated_engine(tmp_path, n))
        yield {n: (engine, limiter) for n, (engine, limiter, _s) in zip(SIZES, made, strict=True)}
    finally:
        for engine, _limiter, store in made:
            await engine.close()
            await store.close()


@pytest.mark.slow
async def test_a_progress_lines_snapshot_costs_the_same_at_100_and_10000_tenants(
    sized: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    statements: dict[int, int] = {}
    levels: dict[int, int] = {}
    for n, (engine, limiter) in sized.items():
        now = engine.clock.monotonic()
        for i in range(n):  # every tenant sent lately: the record keeps the last ones only
            await engine.limiter.reserve(BucketKey.for_send(tenant_name(i), PROVIDERS[0]), 1)
            engine.telemetry.activity.touch(tenant_name(i), PROVIDERS[0], now)
        counter = Statements(engine.store)
        limiter.levels_read = 0
        snap = await engine.snapshot(view=FINAL_VIEW)  # the totals read now, as each second
        statements[n], levels[n] = counter.count, limiter.levels_read
        assert snap.queue is not None and snap.queue.queued == n * 2
        assert snap.queue.tenants_queued is None  # a figure per tenant: not read
        assert snap.depth == () and len(snap.buckets) <= BRIEF_VIEW.emptiest
        assert f"queued {n * 2} " in summary_line(snap, 1.0)
        # Within the second, the totals are not read again: nothing at all from the store.
        counter.count = 0
        await engine.snapshot(view=BRIEF_VIEW)
        assert counter.count == 0
    assert statements[10_000] == statements[100] <= 2, statements  # one sum per state
    assert levels[10_000] <= 3 * RECENT_PAIRS + len(PROVIDERS), levels


def test_the_last_line_reads_the_totals_afresh() -> None:
    assert dataclasses.replace(BRIEF_VIEW, totals_every_s=0.0, totals_most_share=0.0) == FINAL_VIEW
    assert BRIEF_VIEW.deepest == 0 and not BRIEF_VIEW.tenants and not BRIEF_VIEW.buckets


@pytest.mark.slow
async def test_a_metrics_snapshot_costs_the_same_at_100_and_10000_tenants(
    sized: dict[int, tuple[Engine, CountingLimiter]],
) -> None:
    """The view behind a scrape: the totals, the 20 deepest tenants, 32 buckets."""
    fresh = dataclasses.replace(METRICS_VIEW, totals_every_s=0.0)
    statements: dict[int, int] = {}
    for n, (engine, _limiter) in sized.items():
        counter = Statements(engine.store)
        snap = await engine.snapshot(view=fresh)
        statements[n] = counter.count
        assert snap.queue is not None and snap.queue.queued == n * 2
        assert len(snap.depth) == METRICS_VIEW.deepest
    assert statements[10_000] == statements[100], statements


async def test_the_totals_take_at_most_a_share_of_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress line a second reads the totals (a sum over every row of the kept counts,
    which grows with the tenants) no closer together than 100 times what the last read took:
    20 ms reads come 2 s apart, not every second. The last line reads them afresh."""
    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'totals.db'}", SecretBox([SecretBox.generate_key()]))
    await store.migrate()
    engine = Engine(store, LocalLimiter(clock), BUILTIN_KINDS, clock=clock)
    await engine.open()
    try:
        reads: list[float] = []
        real = store.overview.totals

        async def slow_totals() -> QueueOverview:
            reads.append(clock.monotonic())
            time.sleep(0.02)  # the sum at many tenants
            return await real()

        monkeypatch.setattr(store.overview, "totals", slow_totals)
        for _second in range(10):
            await engine.snapshot(view=BRIEF_VIEW)
            clock.advance(1.0)
        assert 3 <= len(reads) <= 5, reads
        assert all(b - a >= 2.0 for a, b in itertools.pairwise(reads)), reads
        before = len(reads)
        await engine.snapshot(view=FINAL_VIEW)
        assert len(reads) == before + 1
    finally:
        await engine.close()
        await store.close()
