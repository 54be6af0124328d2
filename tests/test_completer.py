"""Completer: one flush at a time, whoever flushes, and a cancelled waiter cancels nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from engine.clock import SystemClock
from engine.completer import Completer
from engine.domain import NotificationState, SendResult
from engine.policy import Decision
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
