"""Completer: one flush at a time, whoever flushes, and a cancelled waiter cancels nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from engine.core.clock import FakeClock, SystemClock
from engine.core.domain import NotificationState, SendResult
from engine.core.errors import OmniPostError
from engine.core.policy import Decision
from engine.dispatch.completer import Completer
from engine.store import Completion, Leased


class SlowQueue:
    """Writes a batch only when ``go`` is set; records every batch written, by ids."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.batches: list[list[int]] = []
        self.writing = 0
        self.most_at_once = 0

    async def complete(self, completions: Sequence[Completion], *, worker: str) -> list[bool]:
        self.writing += 1
        self.most_at_once = max(self.most_at_once, self.writing)
        try:
            await self.go.wait()
        finally:
            self.writing -= 1
        self.batches.append([c.leased.id for c in completions])
        return [True] * len(completions)


def lease(id_: int) -> Leased:
    return Leased(id_, 1, 1, "", {}, f"k{id_}", 1, 0, 5, 0.0, "w", 60.0)


def completer(queue: SlowQueue, applied: list[int]) -> Completer:
    def on_applied(batch: Sequence[Completion], ok: Sequence[bool]) -> None:
        applied.extend(c.leased.id for c, written in zip(batch, ok, strict=True) if written)

    return Completer(
        queue,  # type: ignore[arg-type]  # only ``complete`` is called
        SystemClock(),
        owner="w",
        batch=2,
        on_applied=on_applied,
    )


def finish(done: Completer, *ids: int) -> None:
    for id_ in ids:
        decision = Decision(NotificationState.DELIVERED)
        done.finished(lease(id_), SendResult.delivered(), decision, 0.01, now=1.0)


async def test_two_flushes_write_each_outcome_once_one_after_the_other() -> None:
    queue, applied = SlowQueue(), list[int]()
    done = completer(queue, applied)
    finish(done, 3, 1, 2)
    first = asyncio.create_task(done.flush())
    await asyncio.sleep(0)  # the first is writing [1, 3]
    finish(done, 4)
    second = asyncio.create_task(done.flush())
    await asyncio.sleep(0)
    assert queue.writing == 1  # the second waits for the first
    queue.go.set()
    await asyncio.gather(first, second)
    assert queue.most_at_once == 1
    assert sorted(id_ for batch in queue.batches for id_ in batch) == [1, 2, 3, 4]
    assert queue.batches[0] == [1, 3]  # a batch is written in id order
    assert sorted(applied) == [1, 2, 3, 4] and len(done) == 0


async def test_a_cancelled_waiter_does_not_cancel_the_flush_under_way() -> None:
    queue, applied = SlowQueue(), list[int]()
    done = completer(queue, applied)
    finish(done, 1)
    first = asyncio.create_task(done.flush())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(done.flush())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    queue.go.set()
    await first  # not cancelled with the waiter
    assert applied == [1]
    finish(done, 2)
    await done.flush()  # and the next flush is not held by the one that ended
    assert applied == [1, 2]


class RecordingQueue:
    """Writes at once; the first ``fail`` writes raise as a store that is down does."""

    def __init__(self, fail: int = 0) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail

    async def complete(self, completions: Sequence[Completion], *, worker: str) -> list[bool]:
        if self.fail:
            self.fail -= 1
            raise OmniPostError("the store is not answering.")
        self.batches.append([c.leased.id for c in completions])
        return [True] * len(completions)


async def _settle() -> None:
    for _ in range(5):  # the woken task's steps: a flush awaits the queue once
        await asyncio.sleep(0)


async def test_outcomes_are_written_together_a_gather_after_the_first() -> None:
    clock, queue = FakeClock(), RecordingQueue()
    done = Completer(queue, clock, owner="w", batch=10, on_applied=lambda *_: None)  # type: ignore[arg-type]
    runner = asyncio.create_task(done.run())
    await _settle()
    finish(done, 1)
    clock.advance(0.003)
    finish(done, 2)  # within the first one's gather: written with it
    await _settle()
    clock.advance(0.0019)
    await _settle()
    assert queue.batches == []
    clock.advance(0.0001)  # 5 ms after the first
    await _settle()
    assert queue.batches == [[1, 2]] and len(done) == 0
    finish(done, 3)  # a new gather starts with the next outcome (not with the second's)
    clock.advance(0.004)
    await _settle()
    assert queue.batches == [[1, 2]]
    clock.advance(0.001)
    await _settle()
    assert queue.batches == [[1, 2], [3]]
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


@pytest.mark.parametrize(("workers", "gather_s"), [(1, 0.005), (2, 0.010), (4, 0.020), (9, 0.020)])
async def test_one_of_several_workers_gathers_longer(workers: int, gather_s: float) -> None:
    """A worker among ``workers`` finishes a ``workers``-th of the sends: it gathers that many
    times longer (at most four), so its batches are as large as one worker's alone."""
    clock, queue = FakeClock(), RecordingQueue()
    done = Completer(queue, clock, owner="w", batch=10, on_applied=lambda *_: None)  # type: ignore[arg-type]
    done.share_of(workers)
    runner = asyncio.create_task(done.run())
    await _settle()
    finish(done, 1)
    clock.advance(gather_s - 0.0001)
    finish(done, 2)
    await _settle()
    assert queue.batches == []
    clock.advance(0.0001)
    await _settle()
    assert queue.batches == [[1, 2]]
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


async def test_a_failed_write_is_tried_again_and_nothing_is_lost() -> None:
    clock, queue = FakeClock(), RecordingQueue(fail=1)
    done = Completer(queue, clock, owner="w", batch=10, on_applied=lambda *_: None)  # type: ignore[arg-type]
    runner = asyncio.create_task(done.run())
    await _settle()
    finish(done, 1)
    clock.advance(0.005)
    await _settle()
    assert queue.batches == [] and len(done) == 1  # the write failed; kept
    finish(done, 2)
    clock.advance(1.0)  # the retry's wait, then a gather
    await _settle()
    clock.advance(0.005)
    await _settle()
    assert queue.batches == [[1, 2]] and len(done) == 0
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
