"""An asyncio event loop on virtual time, for the planner.

``FakeClock`` (engine/clock.py) puts virtual time under a real loop, which suits tests that
also wait on a real store. A plan has nothing real to wait for, so here the loop itself keeps
virtual time: ``loop.time()`` is a number that moves only when every task waits, straight to
the next timer. Its selector watches nothing and, where a real one would block for ``timeout``
seconds, adds ``timeout`` to the clock. ``asyncio.sleep``, ``asyncio.timeout`` and every timer
then run on virtual time with asyncio's own machinery, and ``LoopClock`` is the ``Clock`` the
engine's parts read it through.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from engine.clock import SystemClock

__all__ = ["LoopClock", "run_virtual"]

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Every task waits and no timer is set: virtual time has nowhere to go."""


class _Timeless(selectors.BaseSelector):
    """Watches nothing; a wait of ``timeout`` seconds moves the loop's clock instead."""

    def __init__(self) -> None:
        self.now = 0.0
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, _fd(fileobj), events, data)
        self._keys[fileobj] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Deadlock("every task waits and nothing is due: the plan cannot go on.")
        self.now += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else int(fileobj.fileno())


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._timeless = _Timeless()
        super().__init__(self._timeless)

    def time(self) -> float:
        return self._timeless.now


class LoopClock(SystemClock):
    """The ``Clock`` of a loop run by ``run_virtual``: both its times are the loop's, and it
    waits as ``SystemClock`` does, through asyncio, which runs on the loop's time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def monotonic(self) -> float:
        return self._loop.time()

    def wall(self) -> float:
        return self._loop.time()

    def __repr__(self) -> str:
        return f"LoopClock(now={self._loop.time():.3f})"


def run_virtual(main: Callable[[LoopClock], Awaitable[T]]) -> T:
    """Run ``main(clock)`` to completion on a new loop whose time starts at 0 and moves only
    when every task waits; raises ``Deadlock`` when they all wait with no timer set."""
    loop = _VirtualLoop()
    try:
        return loop.run_until_complete(_call(main, LoopClock(loop)))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _call(main: Callable[[LoopClock], Awaitable[T]], clock: LoopClock) -> T:
    return await main(clock)
