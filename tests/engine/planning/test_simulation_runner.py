"""The burst-simulation runner on a fake clock that jumps to each wait's end: when it enqueues
what, in which batches, what it reports, and how it waits. No store: the enqueue is a
recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from engine.core.clock import FakeClock
from engine.core.domain import EnqueueItem
from engine.planning.simulate import SimulationProgress, run_simulation

START = 1_000.0


class SleepLog(FakeClock):
    """A fake clock that notes how long each wait on it was asked to be."""

    def __init__(self, *, autojump: bool = True) -> None:
        super().__init__(start=START, autojump=autojump)
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


@dataclass
class Recorder:
    """Stands in for ``Engine.enqueue_many``, noting the clock of each call."""

    clock: SleepLog = field(default_factory=SleepLog)
    calls: list[tuple[float, str, list[EnqueueItem]]] = field(default_factory=list)
    progress: list[SimulationProgress] = field(default_factory=list)

    async def enqueue_many(self, tenant: str, items: Sequence[EnqueueItem]) -> None:
        self.calls.append((self.clock.monotonic(), tenant, list(items)))

    async def run(self, tenants: Sequence[str], offsets: Sequence[float]) -> int:
        return await run_simulation(
            self.enqueue_many,
            self.clock,
            tenants,
            "sms",
            offsets,
            progress=self.progress.append,
            run_id="r1",
        )

    def batches(self) -> list[tuple[float, str, int, int]]:
        """(clock time since the start, tenant, first n, last n) of each enqueue call."""
        return [
            (at - START, tenant, items[0][2]["n"], items[-1][2]["n"])
            for at, tenant, items in self.calls
        ]


# (offsets, tenants, batches as (time, tenant, first n, last n), progress as (enqueued, elapsed))
RUNS: list[
    tuple[list[float], list[str], list[tuple[float, str, int, int]], list[tuple[int, float]]]
] = [
    ([], ["a"], [], []),
    ([0.0] * 3, ["a", "b"], [(0.0, "a", 0, 2), (0.0, "b", 0, 2)], [(6, 0.0)]),
    (  # a spike comes in batches of 500, each tenant in turn
        [0.0] * 1_200,
        ["a", "b"],
        [
            (0.0, "a", 0, 499),
            (0.0, "b", 0, 499),
            (0.0, "a", 500, 999),
            (0.0, "b", 500, 999),
            (0.0, "a", 1_000, 1_199),
            (0.0, "b", 1_000, 1_199),
        ],
        [(1_000, 0.0), (2_000, 0.0), (2_400, 0.0)],
    ),
    (  # each arrival at its offset, waiting in between
        [0.0, 0.5, 1.0, 1.03],
        ["a"],
        [(0.0, "a", 0, 0), (0.5, "a", 1, 1), (1.0, "a", 2, 2), (1.03, "a", 3, 3)],
        [(1, 0.0), (2, 0.5), (3, 1.0), (4, 1.03)],
    ),
    (  # arrivals due together go together
        [0.0, 0.2, 0.2, 0.2, 0.3],
        ["a"],
        [(0.0, "a", 0, 0), (0.2, "a", 1, 3), (0.3, "a", 4, 4)],
        [(1, 0.0), (4, 0.2), (5, 0.3)],
    ),
]


@pytest.mark.parametrize(("offsets", "tenants", "batches", "progress"), RUNS)
async def test_runs_on_a_fake_clock(
    offsets: list[float],
    tenants: list[str],
    batches: list[tuple[float, str, int, int]],
    progress: list[tuple[int, float]],
) -> None:
    recorder = Recorder()
    assert await recorder.run(tenants, offsets) == len(offsets) * len(tenants)
    assert recorder.batches() == [(pytest.approx(t), *rest) for t, *rest in batches]
    total = len(offsets) * len(tenants)
    assert [(p.enqueued, p.total) for p in recorder.progress] == [(n, total) for n, _ in progress]
    elapsed = [p.elapsed_s for p in recorder.progress]
    assert elapsed == pytest.approx([s for _, s in progress])


async def test_waits_in_short_steps_never_past_the_next_arrival() -> None:
    recorder = Recorder()
    await recorder.run(["a"], [0.0, 0.12, 0.13])
    assert recorder.clock.sleeps == pytest.approx([0.05, 0.05, 0.02, 0.01])


async def test_items_name_the_run_and_the_tenant() -> None:
    recorder = Recorder()
    await recorder.run(["acme", "globex"], [0.0, 0.0])
    assert [(tenant, [i[:5] for i in items]) for _, tenant, items in recorder.calls] == [
        (
            "acme",
            [
                ("sms", "sim0@acme.example", {"sim": "r1", "n": 0}, "sim-r1-0", 0),
                ("sms", "sim1@acme.example", {"sim": "r1", "n": 1}, "sim-r1-1", 0),
            ],
        ),
        (
            "globex",
            [
                ("sms", "sim0@globex.example", {"sim": "r1", "n": 0}, "sim-r1-0", 0),
                ("sms", "sim1@globex.example", {"sim": "r1", "n": 1}, "sim-r1-1", 0),
            ],
        ),
    ]


async def test_each_run_gets_its_own_keys() -> None:
    keys: list[str | None] = []

    async def enqueue_many(tenant: str, items: Sequence[EnqueueItem]) -> None:
        keys.extend(item[3] for item in items)

    for _ in range(2):
        await run_simulation(enqueue_many, FakeClock(), ["a"], "sms", [0.0])
    assert len(set(keys)) == 2


async def test_a_cancelled_run_stops_enqueueing() -> None:
    recorder = Recorder(SleepLog(autojump=False))  # the clock stands still: the run waits
    task = asyncio.ensure_future(recorder.run(["a"], [0.0, 5.0]))
    while not recorder.clock.sleeps:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [len(items) for _, _, items in recorder.calls] == [1]
    assert recorder.clock.next_deadline is None, "the cancelled wait left no timer behind"
