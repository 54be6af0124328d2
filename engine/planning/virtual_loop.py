"""An asyncio event loop on virtual time, for the planner.

``FakeClock`` (engine/core/clock.py) puts virtual time under a real loop, which suits tests that
also wait on a real store. A plan has nothing real to wait for, so here the loop itself keeps
virtual time: ``loop.time()`` is a number that moves only when every task waits, straight to
the next timer. Its selector watches nothing and, where a real one would block for ``timeout``
seconds, adds ``timeout`` to the clock. ``asyncio.sleep``, ``asyncio.timeout`` and every timer
then run on virtual time with asyncio's own machinery, and ``LoopClock`` is the ``Clock`` the
engine's parts read it through.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import selectors
import sys
from asyncio import format_helpers
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Context
from typing import Any, TypeVar, TypeVarTuple, Unpack

from engine.core.clock import SystemClock

__all__ = ["LoopClock", "run_virtual"]

T = TypeVar("T")
_Ts = TypeVarTuple("_Ts")

# asyncio.base_events' own thresholds, which ``_VirtualLoop._run_once`` follows.
_MIN_SCHEDULED = 100  # _MIN_SCHEDULED_TIMER_HANDLES
_MIN_CANCELLED = 0.5  # _MIN_CANCELLED_TIMER_HANDLES_FRACTION
_MAX_SELECT_S = 24 * 3600  # MAXIMUM_SELECT_TIMEOUT
# The Pythons whose asyncio internals ``_LeanVirtualLoop`` and ``LoopClock`` were checked on.
LEAN = sys.version_info[:2] in ((3, 11), (3, 12), (3, 13))


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
    """asyncio's selector loop on ``_Timeless``."""

    def __init__(self) -> None:
        self._timeless = _Timeless()
        super().__init__(self._timeless)

    def time(self) -> float:
        return self._timeless.now


class _LeanVirtualLoop(_VirtualLoop):
    """``_VirtualLoop`` with a leaner loop iteration (a plan runs several per send) that keeps
    asyncio's order of callbacks exactly. It reads and writes asyncio's private state, as
    CPython 3.11 to 3.13 keep it; on any other version ``run_virtual`` uses ``_VirtualLoop``,
    and ``tests/engine/planning/test_planner.py`` checks that both give the same plans.

    Its timers are asyncio's ``TimerHandle``s on a heap, as in ``BaseEventLoop``, but each
    as ``(when, timer)``: the heap compares the floats in C where asyncio calls
    ``TimerHandle.__lt__``, a Python method, some twenty times per send. The outcome of each
    comparison is the same (of two equal times, the pair compares the timers, and neither
    timer is below the other), so heapq moves the same entries the same way and timers due
    at the very same instant still run in asyncio's order. ``call_at`` and ``_run_once`` are
    the only parts of ``BaseEventLoop`` that read the heap (3.11 to 3.13); both are here.
    """

    # asyncio's private state, as BaseEventLoop keeps it; the subclass declares what it reads.
    _ready: collections.deque[asyncio.Handle]
    _scheduled: list[tuple[float, Any]]  # (when, TimerHandle); see the class docstring
    _timer_cancelled_count: int
    _stopping: bool
    _clock_resolution: float
    _debug: bool
    _closed: bool
    _current_handle: asyncio.Handle | None

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.Handle:
        """``BaseEventLoop.call_soon`` without its checks for a closed or debugged loop (made
        by asyncio's own method then): every future that completes schedules its tasks here."""
        if self._debug or self._closed:
            return super().call_soon(callback, *args, context=context)
        # ``_Soon(callback, args, self, context)``, its ``__init__`` written out here (one
        # Python call less, some three times per send).
        handle = _new(_Soon)
        handle._context = context if context is not None else contextvars.copy_context()
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)
        return handle

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """``BaseEventLoop.call_at``, onto this loop's heap of ``(when, timer)``."""
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            self._check_thread()  # type: ignore[attr-defined]
            self._check_callback(callback, "call_at")  # type: ignore[attr-defined]
        if self._debug:  # asyncio's own, which records where it was made
            timer: asyncio.TimerHandle = asyncio.TimerHandle(when, callback, args, self, context)
            timer._scheduled = True  # type: ignore[attr-defined]
        else:  # ``_Timer(when, callback, args, self, context)``, its ``__init__`` written out
            timer = _new(_Timer)
            timer._context = context if context is not None else contextvars.copy_context()
            timer._loop = self
            timer._callback = callback
            timer._args = args
            timer._cancelled = False
            timer._repr = None
            timer._source_traceback = None
            timer._when = when
            timer._scheduled = True  # it goes on the heap at once
        heapq.heappush(self._scheduled, (when, timer))
        return timer

    def _run_once(self) -> None:
        """``BaseEventLoop._run_once`` without what a loop that watches nothing does not need
        (no select, no I/O events): the same steps on the same heap of timers, the cancelled
        ones dropped as asyncio drops them and the clock moved by the same sum. Runs one
        iteration after the other until ``stop``, as ``run_forever`` calls it, rather than one
        per call: a plan runs some three per send.

        The timers of ``LoopClock``'s waits (``_wake``) only resolve a future, which makes its
        task's next step ready. When the timers due are all such and nothing else is ready,
        they are resolved here, in their order, rather than run as callbacks: the steps they
        make ready are the same, in the same order, and nothing else runs in between."""
        ready = self._ready
        clock = self._timeless
        resolution = self._clock_resolution
        while True:
            scheduled = self._scheduled
            if len(scheduled) > _MIN_SCHEDULED or (scheduled and scheduled[0][1]._cancelled):
                scheduled = self._drop_cancelled()  # else it would do nothing
            if not (ready or self._stopping):
                if not scheduled:
                    clock.select(None)  # raises Deadlock
                # ``min(max(0, ahead), _MAX_SELECT_S)``, without the calls: once per iteration
                ahead = scheduled[0][0] - clock.now
                if ahead > 0:
                    clock.now += ahead if ahead < _MAX_SELECT_S else _MAX_SELECT_S
            end_time = clock.now + resolution
            wakes = not (ready or self._debug)  # the timers due come first; each wakes a task?
            while scheduled:
                if scheduled[0][0] >= end_time:
                    break
                _, timer = heapq.heappop(scheduled)
                timer._scheduled = False
                ready.append(timer)
                wakes = wakes and timer._callback is _wake
            if wakes:  # ``_wake`` each, here: their tasks are woken in the same order
                for _ in range(len(ready)):
                    woken = ready.popleft()._args[0]
                    if not woken.done():
                        woken.set_result(None)
            self._run_ready(end_time)
            if self._stopping:
                return

    def _run_ready(self, end_time: float) -> None:
        """The callbacks ready now, each as ``Handle._run`` runs it (inlined: a plan runs some
        seven per send), a callback that raises reported as it reports one; then, while no
        timer falls due before ``end_time`` and the loop is not stopping, the callbacks those
        made ready, and so on: what the next iterations would do, as no time passes, without
        their bookkeeping (a task woken by a timer runs one iteration after it)."""
        if self._debug:
            self._run_ready_debug()
            return
        ready: collections.deque[Any] = self._ready
        while True:
            for _ in range(len(ready)):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # noqa: BLE001  # as Handle._run: reported
                    self._report(handle, exc)
            if not ready or self._stopping or self._debug:  # debug: set by a callback
                return
            scheduled = self._scheduled
            if scheduled and scheduled[0][0] < end_time:
                return  # a timer is due (or a cancelled one to drop): a whole iteration

    def _report(self, handle: Any, exc: BaseException) -> None:
        callback = format_helpers._format_callback_source(handle._callback, handle._args)
        message = f"Exception in callback {callback}"
        self.call_exception_handler({"message": message, "exception": exc, "handle": handle})

    def _run_ready_debug(self) -> None:
        """The callbacks ready now, each as the current handle (no virtual time passes in a
        callback: none is ever slow)."""
        ready = self._ready
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            self._current_handle = handle
            try:
                handle._run()
            finally:
                self._current_handle = None

    def _drop_cancelled(self) -> list[tuple[float, Any]]:
        """The timers' heap without the cancelled timers at its head, or without any when
        they are most of it: as ``BaseEventLoop._run_once`` drops them."""
        scheduled = self._scheduled
        count = len(scheduled)
        if count > _MIN_SCHEDULED and self._timer_cancelled_count / count > _MIN_CANCELLED:
            kept = []
            for entry in scheduled:
                if entry[1]._cancelled:
                    entry[1]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                _, timer = heapq.heappop(scheduled)
                timer._scheduled = False
        return scheduled


class _Soon(asyncio.Handle):
    """A ``Handle`` of a loop not in debug mode, made by ``call_soon`` without asyncio's layers
    for debugging (``Handle.__init__`` asks the loop whether it is in debug mode), with the
    same state: every task woken, every future's callback is one."""

    __slots__ = ()
    # asyncio's own slots (``Handle.__slots__``), which typeshed does not declare.
    _context: Context
    _loop: _LeanVirtualLoop
    _callback: Callable[..., object] | None
    _repr: str | None
    _source_traceback: Any


class _Timer(asyncio.TimerHandle):
    """A ``TimerHandle`` of a loop not in debug mode, made by ``call_at`` and cancelled without
    asyncio's layers for debugging (a traceback of where it was made, a repr kept when
    cancelled) and with the same state: a plan makes some three per send
    (``LoopClock.wait_for`` cancels its timer whichever way the wait ends,
    ``LoopClock.sleep`` only when cut short). ``call_soon`` and ``call_at`` each set their own
    kind's attributes: code that stored them on both kinds would lose CPython's
    specialisation (measured: 2.6% more instructions per planned send)."""

    __slots__ = ()
    # asyncio's own slots (``Handle.__slots__``, ``TimerHandle.__slots__``), which typeshed
    # does not declare.
    _context: Context
    _loop: _LeanVirtualLoop
    _callback: Callable[..., object] | None
    _repr: str | None
    _source_traceback: Any
    _when: float
    _scheduled: bool

    def cancel(self) -> None:
        """``TimerHandle.cancel``: counted as cancelled on the heap while it is still there."""
        if self._cancelled:
            return
        if self._loop._debug:  # set after it was made
            super().cancel()
            return
        if self._scheduled:  # ``BaseEventLoop._timer_handle_cancelled``
            self._loop._timer_cancelled_count += 1
        self._cancelled = True
        self._callback = None  # as asyncio drops the references
        self._args = None  # type: ignore[assignment]


class LoopClock(SystemClock):
    """The ``Clock`` of a loop run by ``run_virtual``: both its times are the loop's, and it
    waits as ``SystemClock`` does, through asyncio, which runs on the loop's time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # The time is read many times per send: straight from the virtual loop's selector.
        self._time = loop._timeless if isinstance(loop, _VirtualLoop) else _LoopTime(loop)
        self._lean = isinstance(loop, _LeanVirtualLoop)

    def monotonic(self) -> float:
        return self._time.now

    def wall(self) -> float:
        return self._time.now

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(max(0.0, seconds))``, step for step (the same timer, made at the
        same moment), without its layers of calls: a plan sleeps several times per send."""
        if not self._lean:
            await super().sleep(seconds)
            return
        if not seconds > 0:  # NaN too, as max(0.0, NaN) is 0.0
            await asyncio.sleep(0)
            return
        loop = self._loop
        woken: asyncio.Future[None] = asyncio.Future(loop=loop)  # loop.create_future(), direct
        timer = loop.call_at(self._time.now + seconds, _wake, woken)
        try:
            await woken
        except BaseException:  # cut short (cancelled): its timer goes; else it has run
            timer.cancel()
            raise

    async def wait_for(self, event: asyncio.Event, timeout_s: float) -> bool:
        """What ``SystemClock.wait_for`` does (``event.wait()`` under ``asyncio.timeout``), step
        for step as the loop sees it: a timer made when the wait starts, a future among the
        event's waiters, the task woken by whichever comes first (from the loop's callback
        queue, as a cancellation would), the timer cancelled when the task goes on. Without
        the cancellation itself (the exception, the ``uncancel`` bookkeeping), which made the
        dispatcher's idle wait, once per send in a plan, its costliest await. Reaches into
        ``Event._waiters``, which ``Event.wait`` itself fills (on the lean loop only)."""
        if not self._lean:
            return await super().wait_for(event, timeout_s)
        loop, now = self._loop, self._time.now
        when = now + timeout_s
        woken: asyncio.Future[None] = asyncio.Future(loop=loop)  # loop.create_future(), direct
        if when <= now:  # as ``asyncio.Timeout.reschedule`` schedules an overdue one
            timer: asyncio.Handle = loop.call_soon(_wake, woken)
        else:
            timer = loop.call_at(when, _wake, woken)
        try:
            if not event.is_set():
                event._waiters.append(woken)
                try:
                    await woken
                finally:
                    event._waiters.remove(woken)
        finally:
            timer.cancel()
        return event.is_set()

    def later(self, seconds: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """``loop.call_later``, on the loop's own time, without its layers of calls."""
        when = self._time.now + (seconds if seconds > 0.0 else 0.0)
        return self._loop.call_at(when, callback)

    def __repr__(self) -> str:
        return f"LoopClock(now={self._loop.time():.3f})"


class _LoopTime:
    """Any other loop's time, read as ``_Timeless.now`` is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def now(self) -> float:
        return self._loop.time()


_new = object.__new__  # a handle made without its ``__init__``: see ``call_soon``


def _wake(woken: asyncio.Future[Any]) -> None:
    if not woken.done():
        woken.set_result(None)


def run_virtual(main: Callable[[LoopClock], Awaitable[T]]) -> T:
    """Run ``main(clock)`` to completion on a new loop whose time starts at 0 and moves only
    when every task waits; raises ``Deadlock`` when they all wait with no timer set."""
    loop = _LeanVirtualLoop() if LEAN else _VirtualLoop()
    try:
        return loop.run_until_complete(_call(main, LoopClock(loop)))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _call(main: Callable[[LoopClock], Awaitable[T]], clock: LoopClock) -> T:
    return await main(clock)
