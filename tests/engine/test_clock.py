"""The clocks: virtual time that wakes sleepers in deadline order, by hand or by itself, and
the real clock behind the same waiting."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine import FakeClock, SystemClock
from engine.core.clock import Clock

# -- stepped by hand ---------------------------------------------------------------------------


async def test_sleepers_wake_in_deadline_order_when_the_clock_is_advanced() -> None:
    clock = FakeClock(start=0.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.monotonic()))

    tasks = [
        asyncio.create_task(sleeper(name, s))
        for name, s in [("c", 3.0), ("a", 1.0), ("b", 2.0), ("a2", 1.0)]
    ]
    await asyncio.sleep(0)  # every sleeper is waiting now
    assert clock.next_deadline == 1.0
    clock.advance(0.5)
    await asyncio.sleep(0)
    assert woke == []
    clock.advance(1.5)  # to 2.0: three are due; they wake by deadline, ties as they began
    await asyncio.gather(*tasks[1:])
    assert woke == [("a", 2.0), ("a2", 2.0), ("b", 2.0)]
    clock.advance(1.0)
    await tasks[0]
    assert woke[-1] == ("c", 3.0)
    assert clock.next_deadline is None


def test_wall_time_moves_with_monotonic_time_and_never_back() -> None:
    clock = FakeClock(start=10.0, wall_offset=1_000.0)
    assert (clock.monotonic(), clock.wall()) == (10.0, 1_010.0)
    clock.advance(2.5)
    assert (clock.monotonic(), clock.wall()) == (12.5, 1_012.5)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-0.1)
    assert repr(clock) == "FakeClock(now=12.500, waiting=0)"


async def test_a_cancelled_sleeper_leaves_no_deadline_behind() -> None:
    clock = FakeClock(start=0.0)
    task = asyncio.create_task(clock.sleep(5.0))
    await asyncio.sleep(0)
    assert clock.next_deadline == 5.0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.next_deadline is None


async def test_sleeping_zero_or_less_only_yields() -> None:
    clock = FakeClock(start=0.0)
    await clock.sleep(0.0)
    await clock.sleep(-1.0)
    assert clock.monotonic() == 0.0


# (event set after s, or never; timeout s; returns, virtual seconds waited)
WAIT_FOR = [
    pytest.param(0.0, 1.0, True, 0.0, id="already-set"),
    pytest.param(0.4, 1.0, True, 0.4, id="set-before-the-timeout"),
    pytest.param(None, 1.0, False, 1.0, id="times-out"),
    pytest.param(None, 0.0, False, 0.0, id="no-time-at-all"),
]


@pytest.mark.parametrize(("set_after_s", "timeout_s", "returns", "waited_s"), WAIT_FOR)
async def test_wait_for_an_event_on_virtual_time(
    set_after_s: float | None, timeout_s: float, returns: bool, waited_s: float
) -> None:
    clock = FakeClock(start=0.0, autojump=True)
    event = asyncio.Event()

    async def setter(after_s: float) -> None:
        await clock.sleep(after_s)
        event.set()

    tasks = []
    if set_after_s == 0.0:
        event.set()
    elif set_after_s is not None:
        tasks.append(asyncio.create_task(setter(set_after_s)))
    assert await clock.wait_for(event, timeout_s) is returns
    assert clock.monotonic() == waited_s
    await asyncio.gather(*tasks)


async def test_a_timeout_cancels_the_body_at_its_deadline() -> None:
    clock = FakeClock(start=0.0, autojump=True)
    with pytest.raises(TimeoutError):
        async with clock.timeout(2.0):
            await clock.sleep(10.0)
    assert clock.monotonic() == 2.0
    async with clock.timeout(2.0):
        await clock.sleep(1.5)  # in time: nothing raised
    assert clock.monotonic() == 3.5
    assert clock.next_deadline is None


async def test_a_cancellation_from_outside_is_not_taken_for_a_timeout() -> None:
    clock = FakeClock(start=0.0)

    async def body() -> None:
        async with clock.timeout(5.0):
            await asyncio.Event().wait()

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- autojump -----------------------------------------------------------------------------------


async def test_autojump_goes_from_deadline_to_deadline_while_every_task_waits() -> None:
    clock = FakeClock(start=0.0, autojump=True)
    woke: list[tuple[int, float]] = []

    async def sleeper(n: int) -> None:
        for _ in range(2):
            await clock.sleep(float(n))
            woke.append((n, clock.monotonic()))

    await asyncio.gather(*(sleeper(n) for n in (3, 1, 2)))
    # At 2.0 the sleeper that began waiting first (at 0.0) wakes first.
    assert woke == [(1, 1.0), (2, 2.0), (1, 2.0), (3, 3.0), (2, 4.0), (3, 6.0)]
    assert clock.jumps == 5  # 1, 2, 3, 4, 6


async def test_autojump_waits_while_any_task_can_run() -> None:
    clock = FakeClock(start=0.0, autojump=True)
    seen: list[float] = []

    async def busy_loop() -> None:
        for _ in range(50):
            await asyncio.sleep(0)  # always ready again: the loop is never idle
        seen.append(clock.monotonic())

    await asyncio.gather(clock.sleep(1.0), busy_loop())
    assert seen == [0.0]
    assert clock.monotonic() == 1.0


async def test_autojump_waits_for_real_work_marked_busy() -> None:
    clock = FakeClock(start=0.0, autojump=True)
    seen: list[float] = []

    async def store_call() -> None:
        with clock.busy():
            await asyncio.sleep(0.02)  # real I/O: the loop is idle, but time must not jump
        seen.append(clock.monotonic())

    await asyncio.gather(clock.sleep(1.0), store_call())
    assert seen == [0.0]
    assert clock.monotonic() == 1.0


async def test_without_autojump_the_clock_stands_still() -> None:
    clock = FakeClock(start=0.0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):  # real time: the fake clock never gets there
            await clock.sleep(1.0)
    assert clock.monotonic() == 0.0


# -- the real clock -----------------------------------------------------------------------------


async def test_the_system_clock_waits_in_real_time() -> None:
    clock: Clock = SystemClock()
    start = clock.monotonic()
    await clock.sleep(0.02)
    event = asyncio.Event()
    assert not await clock.wait_for(event, 0.02)
    event.set()
    assert await clock.wait_for(event, 10.0)
    with pytest.raises(TimeoutError):
        async with clock.timeout(0.02):
            await asyncio.Event().wait()
    assert clock.monotonic() - start >= 0.06
    assert abs(clock.wall() - time.time()) < 1.0


async def test_a_sleep_without_end_is_not_a_deadline_to_jump_to() -> None:
    clock = FakeClock(start=0.0, autojump=True)
    forever = asyncio.create_task(clock.sleep(float("inf")))
    await clock.sleep(1.0)
    assert clock.monotonic() == 1.0
    assert clock.next_deadline is None
    assert not forever.done()
    forever.cancel()
    with pytest.raises(asyncio.CancelledError):
        await forever


def _later_on(clock: Clock, calls: list[tuple[str, float]]) -> None:
    """Three callbacks, the middle one cancelled."""
    clock.later(0.02, lambda: calls.append(("b", clock.monotonic())))
    clock.later(0.01, lambda: calls.append(("a", clock.monotonic()))).cancel()
    clock.later(0.01, lambda: calls.append(("c", clock.monotonic())))


async def test_later_calls_back_at_its_time_unless_cancelled() -> None:
    fake = FakeClock(start=0.0)
    calls: list[tuple[str, float]] = []
    _later_on(fake, calls)
    fake.advance(0.015)
    assert calls == [("c", 0.015)]
    fake.advance(0.01)
    assert calls == [("c", 0.015), ("b", 0.025)]
    fake.later(0.0, lambda: calls.append(("now", fake.monotonic())))
    assert calls[-1] == ("now", 0.025)  # due already: called at once

    real: Clock = SystemClock()
    calls = []
    start = real.monotonic()
    _later_on(real, calls)
    await asyncio.sleep(0.05)
    assert [name for name, _ in calls] == ["c", "b"]
    assert calls[0][1] - start >= 0.01 and calls[1][1] - start >= 0.02
