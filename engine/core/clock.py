"""Clocks: the async parts of the engine take one in their constructor, read time from it and
wait through it, so that tests can run them on virtual time.

``SystemClock`` is real time and asyncio's own waiting. ``FakeClock`` is virtual time: it moves
only when a test advances it, or, with ``autojump``, when nothing else can run (as trio's
``MockClock(autojump_threshold=0)``), so that a test of seconds of retries and rate limits takes
milliseconds and runs the same every time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Protocol

__all__ = ["Clock", "FakeClock", "Scheduled", "SystemClock"]


class Scheduled(Protocol):
    """A callback ``Clock.later`` will call; ``cancel`` stops it (nothing when it has run)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; for rate limiting and timeouts."""
        ...

    def wall(self) -> float:
        """Unix seconds; for timestamps shared with other processes through the store."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` on this clock (at once, after yielding, for <= 0)."""
        ...

    async def wait_for(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Wait until ``event`` is set or ``timeout_s`` passed on this clock; returns whether
        it is set."""
        ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """``async with clock.timeout(s):`` raises ``TimeoutError`` when its body takes longer
        than ``s`` on this clock, as ``asyncio.timeout`` does."""
        ...

    def later(self, seconds: float, callback: Callable[[], object]) -> Scheduled:
        """Call ``callback()`` from the running event loop after ``seconds`` on this clock, as
        ``loop.call_later`` does (a task need not wake to start the wait)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def wait_for(self, event: asyncio.Event, timeout_s: float) -> bool:
        return await _wait_for(self, event, timeout_s)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)

    def later(self, seconds: float, callback: Callable[[], object]) -> Scheduled:
        return asyncio.get_running_loop().call_later(max(0.0, seconds), callback)

    def __repr__(self) -> str:
        return "SystemClock()"


async def _wait_for(clock: Clock, event: asyncio.Event, timeout_s: float) -> bool:
    try:
        async with clock.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


class _Timer:
    """A callback due at a virtual instant; ``cancel`` makes it a no-op (removed lazily)."""

    __slots__ = ("callback", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], object]) -> None:
        self.deadline = deadline
        self.callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        self.callback = None


class FakeClock:
    """Virtual time. ``monotonic()`` starts at ``start``; ``wall()`` is always ``monotonic()``
    plus ``wall_offset``, so leases and ``available_at`` written to the store agree with it.

    Sleepers and timeouts wake when the clock reaches their deadline, in deadline order (ties
    in the order they began). It moves by ``advance``, or, with ``autojump``, by itself: as
    soon as the event loop has nothing ready to run and no ``busy()`` block is open, it jumps
    to the next deadline. Time then passes only while every task waits, and waits exactly as
    long as the code under test asked; it also passes while a task waits on something that
    is not this clock (a real ``asyncio.sleep``, a socket), so wrap such real work, a store
    call, in ``busy()``.
    """

    def __init__(
        self,
        start: float = 1_000.0,
        wall_offset: float = 1_700_000_000.0,
        *,
        autojump: bool = False,
    ) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self.autojump = autojump
        self._timers: list[tuple[float, int, _Timer]] = []  # a heap by (deadline, order)
        self._order = itertools.count()
        self._busy = 0
        self._watch: asyncio.Handle | None = None
        self._watch_loop: asyncio.AbstractEventLoop | None = None
        self.jumps = 0  # how many times autojump moved the clock

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper and timeout that is due, in deadline
        order (they run when the caller next awaits). Raises ``ValueError`` for
        ``seconds < 0``: time never goes backwards."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back; advance({seconds!r}).")
        self._now += seconds
        while self._timers and self._timers[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._timers)
            callback, timer.callback = timer.callback, None
            if callback is not None:
                callback()
        self._arm()

    @property
    def next_deadline(self) -> float | None:
        """The earliest instant a sleeper or timeout waits for; None when nothing waits."""
        self._drop_cancelled()
        return self._timers[0][0] if self._timers else None

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self._call_at(self._now + seconds, lambda: _resolve(woken))
        try:
            await woken
        finally:
            timer.cancel()

    async def wait_for(self, event: asyncio.Event, timeout_s: float) -> bool:
        return await _wait_for(self, event, timeout_s)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return self._timeout(seconds)

    def later(self, seconds: float, callback: Callable[[], object]) -> Scheduled:
        """Called when the clock reaches ``now + seconds`` (at once, from here, for <= 0)."""
        return self._call_at(self._now + seconds, callback)

    @asynccontextmanager
    async def _timeout(self, seconds: float) -> AsyncIterator[None]:
        # asyncio's own Timeout, never due on the loop's clock and made due when this one
        # reaches the deadline: it keeps asyncio's rules for telling our cancellation from
        # someone else's.
        async with asyncio.timeout(None) as scope:
            loop = asyncio.get_running_loop()
            timer = self._call_at(self._now + seconds, lambda: scope.reschedule(loop.time()))
            try:
                yield
            finally:
                timer.cancel()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Real work is under way (a store call, a thread): ``autojump`` waits for it."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self._arm()

    def _call_at(self, deadline: float, callback: Callable[[], object]) -> _Timer:
        timer = _Timer(deadline, callback)
        if deadline <= self._now or not math.isfinite(deadline):
            if deadline <= self._now:
                callback()
            timer.cancel()  # and one at infinity never comes: autojump must not go there
            return timer
        heapq.heappush(self._timers, (deadline, next(self._order), timer))
        self._arm()
        return timer

    def _drop_cancelled(self) -> None:
        while self._timers and self._timers[0][2].callback is None:
            heapq.heappop(self._timers)

    # -- autojump ----------------------------------------------------------------------------

    def _arm(self) -> None:
        """Look again, once the callbacks ready now have run, whether the loop is idle."""
        if not self.autojump or not self._timers:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # advanced outside a loop: nothing can be waiting
            return
        if self._watch is None or self._watch_loop is not loop:  # not one left on a closed loop
            self._watch = loop.call_soon(self._jump_if_idle, loop)
            self._watch_loop = loop

    def _jump_if_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        self._watch = None
        if self._busy:
            return  # the end of busy() looks again
        if _has_ready_callbacks(loop):
            self._watch = loop.call_soon(self._jump_if_idle, loop)
            return
        deadline = self.next_deadline
        if deadline is not None:
            self.jumps += 1
            self.advance(deadline - self._now)

    def __repr__(self) -> str:
        self._drop_cancelled()
        waiting = sum(1 for _, _, timer in self._timers if timer.callback is not None)
        jump = ", autojump" if self.autojump else ""
        return f"FakeClock(now={self._now:.3f}, waiting={waiting}{jump})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _has_ready_callbacks(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether some callback (a task's next step) is ready to run: the loop is not idle.

    asyncio has no public "all tasks are blocked" hook (trio's run loop asks its clock), so
    this reads the ready queue of CPython's event loops; a loop without one counts as idle."""
    ready = getattr(loop, "_ready", None)
    return bool(ready)
