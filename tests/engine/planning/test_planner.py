"""The what-if planner without a store: its limit changes, its in-memory queue and its plans.

The plans here are checked against what the limits allow by arithmetic (a spike of N through a
bucket of rate r and burst b drains at (N - b) / r), which is how a reader can tell the
planner runs the dispatch policy rather than a formula of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest

from engine import BucketKey, ConfigError, Limit, LimitChange, NotFound, Outcome
from engine.core.domain import NotificationState
from engine.dispatch.dispatcher import DispatcherSettings
from engine.planning import virtual_loop
from engine.planning.memory_store import MemoryQueue, PlanLedger
from engine.planning.model import ProviderModel
from engine.planning.planner import Arrival, PlanSetup, run_plan
from engine.planning.virtual_loop import Deadlock, run_virtual
from engine.store import Completion, Leased, PairLimit, ProviderRecord, TenantRecord

# -- limit changes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "rate", "burst"),
    [
        ("tenant:acme=50", BucketKey.for_tenant("acme"), 50.0, None),
        ("tenant:acme=50:100", BucketKey.for_tenant("acme"), 50.0, 100.0),
        (" provider:sms = 2.5:5 ", BucketKey.for_provider("sms"), 2.5, 5.0),
        ("pair:acme/sms=5", BucketKey.for_pair("acme", "sms"), 5.0, None),
        ("tenant:acme=none", BucketKey.for_tenant("acme"), None, None),
        ("provider:sms=off", BucketKey.for_provider("sms"), None, None),
    ],
)
def test_a_limit_change_is_read_from_its_spelling(
    text: str, key: BucketKey, rate: float | None, burst: float | None
) -> None:
    change = LimitChange.parse(text)
    assert (change.key, change.rate_per_s, change.burst) == (key, rate, burst)
    assert LimitChange.parse(str(change)) == change  # printed as it is written


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nobody=5", "'nobody=5' is not a limit change; write tenant:NAME=RATE[:BURST]"),
        ("tenant:acme=-1", "'tenant:acme=-1': rate must be a finite number above 0"),
        ("tenant:acme=0", "rate must be a finite number above 0"),
        ("tenant:acme=5:0.5", "burst must be a finite number of at least 1"),
        ("tenant:acme=fast", "the rate 'fast' is not a number"),
        ("tenant:acme=5:big", "the burst 'big' is not a number"),
        ("tenant:acme=inf", "the rate must be a finite number"),
        ("pair:acme=5", "a pair is named TENANT/PROVIDER"),
        ("tenant:=5", "is not a limit change"),
        ("queue:acme=5", "is not a limit change"),
    ],
)
def test_a_bad_limit_change_is_one_sentence(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LimitChange.parse(text)
    assert says in caught.value.message
    assert "\n" not in caught.value.message


def test_a_change_without_a_burst_keeps_the_current_one() -> None:
    change = LimitChange.parse("tenant:acme=50")
    assert change.limit(Limit(10, 40)) == Limit(50, 40)
    assert change.limit(None) == Limit(50, 50)  # one second's worth when there was none
    assert LimitChange.parse("tenant:acme=0.5").limit(None) == Limit(0.5, 1)
    assert LimitChange.parse("tenant:acme=none").limit(Limit(10, 40)) is None


# -- the in-memory queue -----------------------------------------------------------------------


def _complete(leased: object, state: NotificationState, *, at: float, **kw: object) -> Completion:
    return Completion(
        leased=leased,  # type: ignore[arg-type]
        outcome=Outcome.DELIVERED if state is NotificationState.DELIVERED else Outcome.TRANSIENT,
        state=state,
        ts=at,
        **kw,  # type: ignore[arg-type]
    )


async def test_the_memory_queue_claims_by_priority_then_age_and_fences_completions() -> None:
    ledger = PlanLedger()
    queue = MemoryQueue(ledger, max_attempts=3)
    queue.add(1, 1, 3, now=0.0)
    queue.add(1, 1, 2, now=0.0, priority=5)
    [due] = await queue.due_pairs(0.0, [1])
    assert (due.due, due.next_available_at) == (5, 0.0)
    first = await queue.claim(1, 1, 3, owner="w", lease_s=30, now=0.0)
    assert [item.id for item in first] == [1, 4, 5]  # the two urgent ones, then the oldest
    assert all(item.attempt == 1 for item in first)
    # A completion from another owner, or an older attempt, is refused.
    stale = [_complete(first[0], NotificationState.DELIVERED, at=1.0)]
    assert await queue.complete(stale, worker="x") == [True]
    assert await queue.complete(stale, worker="x") == [False]  # already finished
    assert await queue.release("someone-else", first[1:]) == 0
    assert await queue.release("w", first[1:]) == 2
    again = await queue.claim(1, 1, 10, owner="w", lease_s=30, now=1.0)
    assert [item.id for item in again] == [2, 3, 4, 5]
    assert {item.id: item.attempt for item in again}[4] == 2  # each claim bumps it
    assert ledger.tenant(1).delivered == 1
    assert ledger.outstanding == 4


async def test_the_memory_queue_orders_any_priority_before_age_also_when_given_back() -> None:
    queue = MemoryQueue(PlanLedger(), max_attempts=3)
    for priority in (0, -3, 7, 0, -3, 7):  # ids 1 to 6
        queue.add(1, 1, 1, now=0.0, priority=priority)

    async def claim_one_by_one(count: int) -> list[Leased]:
        return [
            (await queue.claim(1, 1, 1, owner="w", lease_s=30, now=0.0))[0] for _ in range(count)
        ]

    first = await claim_one_by_one(3)
    assert [item.id for item in first] == [3, 6, 1]
    assert await queue.release("w", first) == 3
    assert [item.id for item in await claim_one_by_one(6)] == [3, 6, 1, 4, 2, 5]


async def test_a_retry_waits_in_the_memory_queue_until_it_falls_due() -> None:
    ledger = PlanLedger()
    queue = MemoryQueue(ledger, max_attempts=3)
    queue.add(2, 7, 1, now=0.0)
    [item] = await queue.claim(2, 7, 1, owner="w", lease_s=30, now=0.0)
    retry = _complete(item, NotificationState.QUEUED, at=0.5, available_at=3.0, spend_attempt=True)
    assert await queue.complete([retry], worker="w") == [True]
    [later] = await queue.due_pairs(1.0)
    assert (later.due, later.next_available_at) == (0, 3.0)
    assert await queue.claim(2, 7, 1, owner="w", lease_s=30, now=2.9) == []
    [again] = await queue.claim(2, 7, 1, owner="w", lease_s=30, now=3.0)
    assert (again.failures, again.attempt) == (1, 2)
    dead = _complete(again, NotificationState.DEAD, at=3.5)
    await queue.complete([dead], worker="w")
    assert (ledger.tenant(2).dead, ledger.tenant(2).delivered, ledger.outstanding) == (1, 0, 0)
    assert await queue.due_pairs(4.0) == []


def test_the_virtual_loop_moves_time_only_to_the_next_timer() -> None:
    async def main(clock: object) -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(3600)
        return start, loop.time()

    assert run_virtual(main) == (0.0, 3600.0)

    async def stuck(clock: object) -> None:
        await asyncio.Event().wait()

    with pytest.raises(Deadlock):
        run_virtual(stuck)


def test_a_callback_that_raises_is_reported_and_the_loop_goes_on() -> None:
    reported: list[dict[str, object]] = []

    def broken() -> None:
        raise ValueError("boom")

    async def main(clock: object) -> float:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context))
        loop.call_soon(broken)
        loop.call_later(5, broken)
        await asyncio.sleep(10)
        return loop.time()

    assert run_virtual(main) == 10.0
    assert len(reported) == 2
    assert all(isinstance(context["exception"], ValueError) for context in reported)
    assert all("Exception in callback" in str(context["message"]) for context in reported)


# -- plans -------------------------------------------------------------------------------------


def _setup(
    tenants: dict[str, Limit | None],
    *,
    provider: Limit | None = None,
    model: ProviderModel | None = None,
    concurrency: int = 16,
    pairs: tuple[PairLimit, ...] = (),
    disabled: tuple[str, ...] = (),
) -> PlanSetup:
    records = tuple(
        TenantRecord(i, name, limit, name not in disabled)
        for i, (name, limit) in enumerate(tenants.items(), start=1)
    )
    return PlanSetup(
        tenants=records,
        providers=(ProviderRecord(1, "sms", "simulated", provider, {}, ()),),
        pairs=pairs,
        models={"sms": model or ProviderModel(latency_ms=5.0)},
        dispatch=DispatcherSettings(concurrency=concurrency),
        max_attempts=5,
    )


def _spike(setup: PlanSetup, count: int) -> list[Arrival]:
    return [Arrival(0.0, t.id, 1, count) for t in setup.tenants]


def test_a_spike_drains_at_the_pace_of_its_tenants_bucket() -> None:
    setup = _setup({"acme": Limit(10, 1), "zeta": Limit(40, 5)})
    plan = run_plan(setup, _spike(setup, 50))
    acme, zeta = plan.tenant("acme"), plan.tenant("zeta")
    latency_s = 0.005
    assert acme.drain_s == pytest.approx(49 / 10 + latency_s, abs=0.01)
    assert zeta.drain_s == pytest.approx(45 / 40 + latency_s, abs=0.01)
    assert (acme.paced_by, zeta.paced_by) == ("tenant:acme", "tenant:zeta")
    assert (acme.delivered, acme.dead, acme.max_queued) == (50, 0, 50)
    assert acme.wait_p95_s is not None and acme.wait_p50_s is not None
    assert acme.drain_s is not None
    assert acme.wait_p50_s < acme.wait_p95_s <= acme.drain_s
    assert plan.total_drain_s == acme.drain_s
    assert plan.unfinished == 0 and plan.notifications == 100
    assert acme.depth[0] == (0.0, 50) and acme.depth[-1][1] == 0


def test_a_shared_provider_bucket_paces_every_tenant_behind_it() -> None:
    setup = _setup({"a": None, "b": None, "c": None}, provider=Limit(30, 3))
    plan = run_plan(setup, _spike(setup, 40))
    assert plan.total_drain_s == pytest.approx((120 - 3) / 30 + 0.005, abs=0.05)
    assert {t.paced_by for t in plan.tenants} == {"provider:sms"}
    [sms] = plan.providers
    assert sms.sends == 120 and sms.utilisation == pytest.approx(1.0, abs=0.05)
    # Round-robin: they share the tokens, so none is done much before the others (one
    # served first would be done after a third of the time).
    drains = [t.drain_s or 0.0 for t in plan.tenants]
    assert min(drains) > 0.9 * max(drains)


def test_keys_behind_an_empty_provider_bucket_wait_for_its_refill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tenants of different rates behind one provider's bucket, which holds them all: a round
    that finds it empty sleeps until it refills, not until some tenant's own bucket would
    (asked then, the provider's would still be empty). About one round, so one sleep, per
    send; a round woken early is wasted work for a worker and for a plan alike."""
    from engine.dispatch.dispatcher import Dispatcher

    sleeps: list[float] = []
    real_sleep = Dispatcher._sleep

    def counted(self: Dispatcher, wait_s: float) -> object:
        sleeps.append(wait_s)
        return real_sleep(self, wait_s)

    monkeypatch.setattr(Dispatcher, "_sleep", counted)
    rates: dict[str, Limit | None] = {f"t{r}": Limit(float(r), 10.0) for r in range(2, 21)}
    model = ProviderModel(latency_ms=20.0, jitter_ms=10.0, seed=1)
    setup = _setup(rates, provider=Limit(150.0, 50.0), model=model)
    plan = run_plan(setup, _spike(setup, 60))
    [sms] = plan.providers
    assert sms.sends == 19 * 60 and plan.unfinished == 0
    assert len(sleeps) <= 1.02 * sms.sends, (
        len(sleeps),
        sms.sends,
    )  # 1.07 when it woke for a tenant


def test_without_limits_the_senders_set_the_pace() -> None:
    setup = _setup({"a": None}, model=ProviderModel(latency_ms=100.0), concurrency=4)
    plan = run_plan(setup, _spike(setup, 40))
    assert plan.tenant("a").drain_s == pytest.approx(40 / 4 * 0.1, rel=0.02)
    assert plan.tenant("a").paced_by == "concurrency"
    # Arrivals slower than the senders go out as they come.
    slow = [Arrival(i * 0.5, 1, 1) for i in range(10)]
    assert run_plan(setup, slow).tenant("a").paced_by == "arrivals"


def test_proposed_changes_are_applied_and_checked() -> None:
    setup = _setup({"acme": Limit(10, 1)}, provider=Limit(100, 10))
    faster = setup.with_changes([LimitChange.parse("tenant:acme=50")], concurrency=4)
    assert faster.tenants[0].limit == Limit(50, 1) and faster.concurrency == 4
    assert run_plan(faster, _spike(faster, 100)).tenant("acme").drain_s == pytest.approx(
        99 / 50 + 0.005, abs=0.01
    )
    pair = setup.with_changes([LimitChange.parse("pair:acme/sms=2:1")])
    assert pair.pairs[0].limit == Limit(2, 1)
    assert "pair:acme/sms" in dict(pair.limits())
    assert not pair.with_changes([LimitChange.parse("pair:acme/sms=none")]).pairs
    unlimited = setup.with_changes([LimitChange.parse("provider:sms=none")])
    assert "provider:sms" not in dict(unlimited.limits())
    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        setup.with_changes([LimitChange.parse("tenant:nobody=5")])
    with pytest.raises(NotFound, match="no provider named 'fax'"):
        setup.with_changes([LimitChange.parse("pair:acme/fax=5")])
    with pytest.raises(ConfigError, match="at least 1"):
        setup.with_changes([], concurrency=0)


def test_failures_retry_and_throttles_hold_the_provider() -> None:
    model = ProviderModel(latency_ms=5, throttle_rate=0.1, permanent_rate=0.1, retry_after_s=0.5)
    setup = _setup({"acme": None}, model=model)
    plan = run_plan(setup, _spike(setup, 200), seed=3)
    acme = plan.tenant("acme")
    assert acme.delivered + acme.dead == 200
    assert 5 < acme.dead < 45  # about a tenth fail for good
    assert acme.sends > 200  # the throttled ones went again
    # Each throttle holds the provider 0.5 s, so the drain is far longer than the sends.
    assert acme.drain_s is not None and acme.drain_s > 1.0


def test_the_same_inputs_give_the_same_plan() -> None:
    model = ProviderModel(latency_ms=20, jitter_ms=10, throttle_rate=0.05, error_rate=0.05)
    setup = _setup({"a": Limit(30, 5), "b": Limit(10, 2)}, provider=Limit(35, 5), model=model)
    first = run_plan(setup, _spike(setup, 60), seed=11)
    again = run_plan(setup, _spike(setup, 60), seed=11)
    assert first.as_json() | {"planned_in_s": 0} == again.as_json() | {"planned_in_s": 0}
    assert [t.depth for t in first.tenants] == [t.depth for t in again.tenants]


@pytest.mark.parametrize("jitter_ms", [0.0, 10.0])
def test_the_lean_loop_plans_exactly_as_asyncios_own_machinery(
    monkeypatch: pytest.MonkeyPatch, jitter_ms: float
) -> None:
    """The planner's lean loop (asyncio's private state, read directly) must not change a plan:
    the same plan as on asyncio's stock loop, with throttles, failures, a shared provider limit
    and, without jitter, sends that finish at the very same instant."""
    if not virtual_loop.LEAN:
        pytest.skip("this Python runs the stock loop only: there is nothing to compare")
    model = ProviderModel(
        latency_ms=20, jitter_ms=jitter_ms, throttle_rate=0.05, error_rate=0.05, retry_after_s=0.2
    )
    setup = _setup({"a": Limit(30, 5), "b": Limit(10, 2), "c": None}, provider=Limit(45, 5))
    setup = dataclasses.replace(setup, models={"sms": model})
    lean = run_plan(setup, _spike(setup, 150), seed=5)
    monkeypatch.setattr(virtual_loop, "LEAN", False)
    stock = run_plan(setup, _spike(setup, 150), seed=5)
    assert lean.as_json() | {"planned_in_s": 0} == stock.as_json() | {"planned_in_s": 0}
    assert [t.depth for t in lean.tenants] == [t.depth for t in stock.tenants]


def test_a_disabled_tenant_is_not_planned_and_does_not_hold_the_plan() -> None:
    setup = _setup({"on": Limit(10, 1), "off": Limit(10, 1)}, disabled=("off",))
    plan = run_plan(setup, _spike(setup, 5))
    off = plan.tenant("off")
    assert (off.delivered, off.drain_s, off.paced_by) == (0, None, "disabled")
    assert plan.tenant("on").drain_s == pytest.approx(0.405, abs=0.01)
    assert plan.unfinished == 5 and plan.total_drain_s is None


def test_a_plan_stops_at_its_horizon() -> None:
    setup = _setup({"slow": Limit(0.01, 1)})
    plan = run_plan(setup, _spike(setup, 100), horizon_s=60.0)
    slow = plan.tenant("slow")
    assert slow.drain_s is None and slow.delivered == 1  # the burst, then none in 60 s
    assert plan.unfinished == 99
    assert math.isclose(slow.depth[-1][0], 60.0, abs_tol=0.01)


def test_the_virtual_loops_clock_calls_back_later_on_its_time() -> None:
    async def main(clock: virtual_loop.LoopClock) -> list[tuple[str, float]]:
        calls: list[tuple[str, float]] = []
        clock.later(2.0, lambda: calls.append(("b", clock.monotonic())))
        clock.later(1.0, lambda: calls.append(("a", clock.monotonic()))).cancel()
        clock.later(1.0, lambda: calls.append(("c", clock.monotonic())))
        clock.later(-1.0, lambda: calls.append(("now", clock.monotonic())))
        await clock.sleep(3.0)
        return calls

    assert run_virtual(main) == [("now", 0.0), ("c", 1.0), ("b", 2.0)]


def test_the_lean_loop_wakes_sleepers_in_asyncios_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sleepers and plain callbacks due at the same instant, and sleeps shorter than the
    clock's resolution while other callbacks are ready: the lean loop wakes the sleepers
    without running their timers as callbacks only when nothing else could run first."""
    if not virtual_loop.LEAN:
        pytest.skip("this Python runs the stock loop only: there is nothing to compare")

    async def main(clock: virtual_loop.LoopClock) -> list[str]:
        loop = asyncio.get_running_loop()
        log: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            log.append(name)
            loop.call_soon(log.append, f"{name} soon")
            await clock.sleep(1e-12)  # due before the loop's next look at the time
            log.append(f"{name} again")

        def chain(n: int) -> None:
            log.append(f"callback {n}")
            if n < 4:
                loop.call_soon(chain, n + 1)

        loop.call_at(1.0, chain, 0)
        await asyncio.gather(sleeper("a", 1.0), sleeper("b", 1.0), sleeper("c", 2.0))
        return log

    lean = run_virtual(main)
    monkeypatch.setattr(virtual_loop, "LEAN", False)
    assert lean == run_virtual(main)
    assert lean.index("c") > lean.index("callback 4")


# -- deadlines ---------------------------------------------------------------------------------


def test_a_plan_counts_what_would_expire_behind_a_tenants_bucket() -> None:
    """100 codes at 10/s (burst 1) with a 5 s TTL: about the first 51 go (one at once, then 10
    a second for 5 s), the rest expire unsent, and none is sent past its deadline."""
    setup = _setup({"acme": Limit(10, 1)})
    plan = run_plan(setup, [Arrival(0.0, 1, 1, 100, ttl_s=5.0)])
    acme = plan.tenant("acme")
    assert 49 <= acme.delivered <= 52
    assert acme.expired == 100 - acme.delivered and acme.dead == 0
    assert acme.sends == acme.delivered  # an expired one is never sent
    assert plan.unfinished == 0
    assert acme.wait_p99_s is not None and acme.wait_p99_s <= 5.0
    assert acme.as_json()["expired"] == acme.expired
    faster = run_plan(
        dataclasses.replace(setup, tenants=(TenantRecord(1, "acme", Limit(40, 1), True),)),
        [Arrival(0.0, 1, 1, 100, ttl_s=5.0)],
    )
    assert faster.tenant("acme").expired == 0


def test_the_memory_queue_expires_at_the_claim_what_is_past_its_deadline() -> None:
    async def run() -> None:
        ledger = PlanLedger()
        queue = MemoryQueue(ledger, max_attempts=5)
        queue.add(1, 1, 3, now=0.0, ttl_s=2.0)
        queue.add(1, 1, 2, now=1.0)
        leased = await queue.claim(1, 1, 4, owner="w", lease_s=30, now=2.5)
        assert len(leased) == 1 and leased[0].expires_at is None  # three expired, one leased
        assert ledger.tenant(1).expired == 3
        later = await queue.claim(1, 1, 4, owner="w", lease_s=30, now=2.5)
        assert len(later) == 1

    asyncio.run(run())
