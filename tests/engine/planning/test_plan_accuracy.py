"""A plan against the real run it predicts, on SQLite and on Postgres.

The burst: three tenants with different limits (40, 20 and 10 per second) and different counts,
behind one provider limit they share (50/s, less than they ask for together), through a
simulated provider with 20 ms of latency and a 1% chance of a throttle that holds the provider
for 0.1 s. The burst is enqueued, the backlog planned (nothing is sent or written), then the
same notifications run for real on the real clock; each tenant's drain time and p95 wait (both
from the start, when everything was queued) must be within 10% of the plan's.

The provider is shared max-min fairly (docs/architecture.md, "Sharing a provider"): b and c
ask for less than a fair third, so each gets its own rate and a the rest. That makes each
tenant's drain a matter of its own bucket and the provider's, not of which key happened to be
first in line when the provider's next token came: before the rule, a key woken by its own
bucket went ahead of keys waiting for the provider, tenant a took most of the provider in the
first seconds for as long as its refills fell just so, and b's real drain varied from 6.6 to
7.9 s against a fixed plan (2 failures in 9 runs). `scripts/repeat_test.py` runs this module
over and over to show it stays green.

Why 10% is a fair bound: across throttle seeds the plan itself moves by up to 5% (which sends
are throttled, and when, holds the provider at different moments), and a real run is one
draw of that. (This test found two dispatcher bugs: a round that skipped the keys behind an
empty provider bucket slept as long as the slowest key's own refill, and tenant b drained 30%
late; and leases a throttle gave back were not counted back into the dispatcher's book, so a
plan, which never polls, left them for an hour.)
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from engine import (
    BUILTIN_KINDS,
    BacklogTraffic,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    Limit,
    LocalLimiter,
    NotificationState,
    Outcome,
    Store,
    SystemClock,
)
from engine.telemetry.figures import percentile
from testkit.support import enqueue_numbered

pytestmark = pytest.mark.slow

BURST = {"a": (Limit(40, 10), 240), "b": (Limit(20, 5), 120), "c": (Limit(10, 5), 60)}
PROVIDER = Limit(50, 10)
OPTIONS = {"latency_ms": "20", "throttle_rate": "0.01", "retry_after_s": "0.1", "seed": "7"}
TOLERANCE = 0.10


@pytest.fixture(autouse=True)
def _session_heap_frozen() -> Iterator[None]:
    """The real runs share the test session's process: late in a whole suite, a collection
    over its heap holds the dispatcher up for a tenth of a second or more, and a bucket with a
    burst of one loses the refill meanwhile (codes behind a burst: 97-101 expired against the
    plan's 80 with such collections forced every 1.5 s, 89 once in a whole suite). What the
    session made before the test is left out of the collections; the dispatcher's own objects
    are collected as in any process."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def test_a_plan_predicts_the_real_drain_and_wait_of_each_tenant(store: Store) -> None:
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=16))
    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
    await engine.open()
    try:
        await engine.provider_add("sim", "simulated", PROVIDER, OPTIONS)
        for name, (limit, count) in BURST.items():
            await engine.tenant_add(name, limit)
            await enqueue_numbered(engine, name, "sim", count)
        queued = await store.queue.backlog()
        report = await engine.plan(BacklogTraffic())
        assert await store.queue.backlog() == queued  # the plan took nothing

        await engine.start()
        started = engine.clock.wall()
        assert await engine.run_until_empty(timeout_s=120)
        for name, (_, count) in BURST.items():
            log = await engine.deliveries(name, limit=10 * count)
            sent_at = sorted(e.ts - started for e in log if e.outcome is Outcome.DELIVERED)
            assert len(sent_at) == count
            real_p95_s = percentile(sent_at, 95)
            planned = report.current.tenant(name)
            assert planned.drain_s is not None and planned.wait_p95_s is not None
            assert real_p95_s is not None
            what = f"{name}: planned {planned.drain_s:.2f}s, p95 {planned.wait_p95_s:.2f}s; "
            what += f"real {sent_at[-1]:.2f}s, p95 {real_p95_s:.2f}s"
            assert planned.drain_s == pytest.approx(sent_at[-1], rel=TOLERANCE), what
            assert planned.wait_p95_s == pytest.approx(real_p95_s, rel=TOLERANCE), what
    finally:
        await engine.close()


# Codes with a deadline behind a bulk send (issue 47, scaled down from a minute's TTL to keep the
# test short): one tenant at 10/s, 50 bulk notifications first (5 s of its bucket), then 150
# codes that are worth sending for 12 s. About 70 codes go, the other 80 expire unsent; the plan
# of the backlog (each code with what is left of its deadline) must say how many within 10%.
CODES_TTL_S = 12.0


async def test_a_plan_predicts_how_many_codes_expire_behind_a_burst(store: Store) -> None:
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=16))
    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
    await engine.open()
    try:
        await engine.provider_add("sim", "simulated", None, {"latency_ms": "5"})
        await engine.tenant_add("acme", Limit(10, 1))
        await enqueue_numbered(engine, "acme", "sim", 50)
        codes = [
            EnqueueItem("sim", f"code{i}@acme.example", {"code": i}, f"code-{i}", 0)._replace(
                ttl_s=CODES_TTL_S
            )
            for i in range(150)
        ]
        await engine.enqueue_many("acme", codes)
        report = await engine.plan(BacklogTraffic())
        planned = report.current.tenant("acme")
        assert planned.notifications == 200

        await engine.start()
        assert await engine.run_until_empty(timeout_s=60)
        depth = {r.state: r.count for r in await store.notifications.depth()}
        real = depth.get(NotificationState.EXPIRED, 0)
        what = f"planned {planned.expired} expired, real {real}"
        assert 60 <= real <= 100, what
        assert planned.expired == pytest.approx(real, rel=TOLERANCE), what
        assert depth.get(NotificationState.DELIVERED, 0) + real == 200
    finally:
        await engine.close()
