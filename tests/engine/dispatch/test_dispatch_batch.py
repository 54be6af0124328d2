"""Providers that take many messages in one call (``BatchProvider``): the dispatcher hands
them parcels of one key's leases, each with its own token, so limits hold as for single
sends; every message gets its own outcome, and a call that fails as a whole fails each.

On virtual time, on both stores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from engine import (
    DispatcherSettings,
    EngineSettings,
    EnqueueItem,
    FakeClock,
    Limit,
    Message,
    NotificationState,
    Outcome,
    ProviderConfig,
    ProviderFactory,
    SendResult,
    Store,
)
from engine.core.errors import ConfigError
from engine.dispatch.work import WorkQueue
from engine.facade.plans import provider_model
from engine.planning.planner import Arrival, PlanSetup, run_plan
from engine.providers.base import batch_size, send_many_within, send_parcel
from engine.providers.file import FileProvider
from engine.providers.simulated import SimulatedProvider
from engine.store import Leased, ProviderRecord, TenantRecord
from testkit.envelope import check_envelope
from testkit.support import counts, enqueue_numbered, message
from testkit.virtual_time import VirtualEngines

DELIVERED, DEAD = NotificationState.DELIVERED, NotificationState.DEAD
CALL_S = 0.03
CONCURRENCY = 4


class Calls:
    """What a scripted batch provider was handed: per call, its virtual time and messages."""

    def __init__(self) -> None:
        self.made: list[tuple[float, list[Message]]] = []

    @property
    def sizes(self) -> list[int]:
        return [len(messages) for _, messages in self.made]

    def sent_at(self) -> list[float]:
        return [at for at, messages in self.made for _ in messages]

    def ids(self) -> list[int]:
        return [m.notification_id for _, messages in self.made for m in messages]


def bulk_kind(clock: FakeClock, calls: Calls) -> ProviderFactory:
    """Takes ``batch_max`` (option, default 8) per call; each call takes 30 ms. A message
    whose payload has ``"fail": true`` fails permanently, the others are delivered."""

    class Bulk:
        def __init__(self, config: ProviderConfig) -> None:
            self.name = config.name
            self.batch_max = int(config.options.get("batch_max", "8"))

        async def send(self, message: Message) -> SendResult:
            return (await self.send_many([message]))[0]

        async def send_many(self, messages: Sequence[Message]) -> list[SendResult]:
            calls.made.append((clock.monotonic(), list(messages)))
            await clock.sleep(CALL_S)
            return [
                SendResult.permanent("refused") if m.payload.get("fail") else SendResult.delivered()
                for m in messages
            ]

        async def aclose(self) -> None:
            """Nothing to release."""

    return Bulk


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
async def engines(store: Store, calls: Calls) -> AsyncIterator[VirtualEngines]:
    clock = FakeClock(autojump=True)
    opened = VirtualEngines(store, clock, {"bulk": bulk_kind(clock, calls)}, store_latency_s=0.005)
    yield opened
    await opened.close()


def settings() -> EngineSettings:
    return EngineSettings(dispatch=DispatcherSettings(concurrency=CONCURRENCY, batch=32))


async def drain(engines: VirtualEngines, batch_max: int, n: int, tag: str) -> float:
    engine = await engines.open(settings())
    await engine.tenant_add(f"big{tag}")
    await engine.provider_add(f"bulk{tag}", "bulk", options={"batch_max": str(batch_max)})
    await enqueue_numbered(engine, f"big{tag}", f"bulk{tag}", n)
    await engine.start()
    took_s = await engines.until_empty(engine)
    await engine.stop()
    return took_s


async def test_a_batch_provider_takes_many_per_call_each_once(
    engines: VirtualEngines, calls: Calls, store: Store
) -> None:
    batched_s = await drain(engines, 8, 400, "b")
    sizes = calls.sizes
    ids = calls.ids()
    assert len(ids) == 400 and len(set(ids)) == 400  # each notification sent once
    assert max(sizes) == 8 and sum(sizes) / len(sizes) > 4, sizes
    assert (await counts(store)).get((1, DELIVERED)) == 400
    calls.made.clear()
    single_s = await drain(engines, 1, 400, "s")
    assert set(calls.sizes) == {1}
    # Singles: 400 calls of 30 ms, 4 at a time, at least 3 s. Parcels of up to 8 cut that.
    assert single_s >= 400 * CALL_S / CONCURRENCY
    assert batched_s < single_s / 3, (batched_s, single_s)


async def test_a_limited_tenant_keeps_its_envelope_through_batches(
    engines: VirtualEngines, calls: Calls
) -> None:
    engine = await engines.open(settings())
    await engine.tenant_add("paced", Limit(40.0, 10.0))
    await engine.provider_add("bulk", "bulk", options={"batch_max": "16"})
    await enqueue_numbered(engine, "paced", "bulk", 200)
    await engine.start()
    took_s = await engines.until_empty(engine)
    await engine.stop()
    assert len(calls.ids()) == 200
    assert max(calls.sizes) > 1  # the burst at least went out together
    check_envelope(calls.sent_at(), 40.0, 10.0)
    assert took_s >= (200 - 10) / 40.0  # no faster than the rate allows


async def test_each_message_of_a_batch_gets_its_own_outcome(
    engines: VirtualEngines, calls: Calls, store: Store
) -> None:
    engine = await engines.open(settings())
    await engine.tenant_add("mixed")
    await engine.provider_add("bulk", "bulk")
    items = [
        EnqueueItem("bulk", f"u{i}@x.example", {"fail": i % 3 == 0}, f"m-{i}", 0) for i in range(30)
    ]
    await engine.enqueue_many("mixed", items)
    await engine.start()
    await engines.until_empty(engine)
    await engine.stop()
    assert max(calls.sizes) > 1
    found = await counts(store)
    assert (found.get((1, DEAD)), found.get((1, DELIVERED))) == (10, 20), found


class Misbehaving:
    """A batch provider that sleeps, raises or miscounts, as told."""

    name = "odd"
    batch_max = 4
    max_latency_s = 1.0

    def __init__(self, clock: FakeClock, how: str) -> None:
        self._clock = clock
        self._how = how

    async def send(self, message: Message) -> SendResult:
        return SendResult.delivered()

    async def send_many(self, messages: Sequence[Message]) -> list[SendResult]:
        if self._how == "slow":
            await self._clock.sleep(5.0)
        if self._how == "raise":
            raise RuntimeError("bug")
        return [SendResult.delivered()] * (len(messages) - (self._how == "short"))

    async def aclose(self) -> None:
        """Nothing to release."""


@pytest.mark.parametrize(
    ("how", "outcome"),
    [("slow", Outcome.UNAVAILABLE), ("raise", Outcome.TRANSIENT), ("short", Outcome.TRANSIENT)],
)
async def test_a_call_that_fails_as_a_whole_fails_each_message(how: str, outcome: Outcome) -> None:
    clock = FakeClock(autojump=True)
    provider = Misbehaving(clock, how)
    provider.max_latency_s = 10.0  # above the timeout: the call is timed
    messages = [message(i) for i in range(3)]
    results = await send_many_within(provider, messages, clock, timeout_s=2.0)
    assert [r.outcome for r in results] == [outcome] * 3


async def test_one_message_goes_through_send_and_batch_size_needs_send_many() -> None:
    clock = FakeClock(autojump=True)
    provider = Misbehaving(clock, "short")  # send_many would miscount; send does not
    assert [r.outcome for r in await send_parcel(provider, [message(1)], clock, 2.0)] == [
        Outcome.DELIVERED
    ]
    assert batch_size(provider) == 4
    assert batch_size(SimulatedProvider(batch_max=1)) == 1

    class NoMany:
        name = "x"
        batch_max = 9

    assert batch_size(NoMany()) == 1  # type: ignore[arg-type]


async def test_file_provider_appends_a_batch_in_one_write(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    provider = FileProvider("f", str(path), batch_max=4)
    messages = [message(1), message(2, {"x": float("nan")}), message(3)]
    results = await provider.send_many(messages)
    assert [r.outcome for r in results] == [
        Outcome.DELIVERED,
        Outcome.PERMANENT,
        Outcome.DELIVERED,
    ]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["notification_id"] for line in lines] == [1, 3]
    assert provider.written == 2
    await provider.aclose()


async def test_batch_max_is_an_option_of_file_and_simulated() -> None:
    made = SimulatedProvider.from_config(ProviderConfig("s", "simulated", {"batch_max": "12"}))
    assert made.batch_max == 12
    for bad in ("0", "-1", "1.5", "many"):
        with pytest.raises(ConfigError, match="batch_max"):
            SimulatedProvider.from_config(ProviderConfig("s", "simulated", {"batch_max": bad}))
        with pytest.raises(ConfigError, match="batch_max"):
            FileProvider.from_config(
                ProviderConfig("f", "file", {"path": "/tmp/x.jsonl", "batch_max": bad})
            )


async def test_simulated_batch_waits_one_latency_and_draws_each_outcome() -> None:
    clock = FakeClock(autojump=True)
    provider = SimulatedProvider(
        latency_ms=20, permanent_rate=0.5, seed=7, clock=clock, batch_max=50
    )
    before = clock.monotonic()
    results = await provider.send_many([message(i) for i in range(50)])
    assert clock.monotonic() - before == pytest.approx(0.02)
    outcomes = {r.outcome for r in results}
    assert outcomes == {Outcome.DELIVERED, Outcome.PERMANENT}
    assert provider.sent == 50


def lease(n: int, tenant: int = 1) -> Leased:
    return Leased(n, tenant, 1, "r", {}, f"k{n}", 1, 0, 3, 0.0, "w", 30.0)


async def test_work_queue_counts_senders_in_parcels() -> None:
    work = WorkQueue(FakeClock())
    dispatch = DispatcherSettings(concurrency=2, batch=64, prefetch=1)
    assert work.room(dispatch, 2, paced=False, per=8) == 24  # 3 parcels of 8
    assert work.room(dispatch, 2, paced=True, per=8) == 16  # the 2 free senders
    work.put((1, 1), [lease(n) for n in range(8)], 0.0, paced=False)
    work.put((1, 1), [lease(8)], 0.0, paced=False)
    assert (len(work), work.inflight) == (2, 9)
    entry = await work.get()
    assert entry is not None and [x.id for x in entry[0]] == list(range(8))
    assert (work.busy, work.inflight) == (1, 9)
    assert work.room(dispatch, 2, paced=False, per=8) == 8  # 3 - 1 sending - 1 waiting
    assert [x.id for x in work.take_provider(1)] == [8]
    work.end(0)
    assert (work.busy, work.inflight, len(work)) == (0, 0, 0)


def test_a_plan_follows_the_provider_batch_size() -> None:
    """The planner's simulated providers take the batch size of the provider's options."""
    drains = []
    for batch_max in (1, 10):
        options = {"latency_ms": "20", "batch_max": str(batch_max)}
        record = ProviderRecord(1, "bulk", "simulated", None, options, ())
        model = provider_model(record, [])
        assert model.batch_max == batch_max
        setup = PlanSetup(
            tenants=(TenantRecord(1, "big", None, True),),
            providers=(record,),
            pairs=(),
            models={"bulk": model},
            dispatch=DispatcherSettings(concurrency=4),
            max_attempts=5,
        )
        plan = run_plan(setup, [Arrival(0.0, 1, 1, 2000)])
        assert plan.unfinished == 0
        drains.append(plan.total_drain_s)
    singles_s, batched_s = drains
    assert singles_s is not None and batched_s is not None
    assert singles_s > 2000 * 0.02 / 4 - 1e-6  # 10 s: 2,000 calls of 20 ms, 4 at a time
    assert batched_s < singles_s / 4, drains
