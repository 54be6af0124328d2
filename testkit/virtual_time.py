"""Engines on virtual time, for the dispatcher's tests.

A ``FakeClock(autojump=True)`` jumps to the next deadline whenever every task waits, so a test
of seconds of rate limits, back-offs and leases takes only the real time its store calls take,
and waits exactly as long each run. The store's calls take real time: ``on_virtual_time``
marks each one ``busy`` so that the clock waits for it instead of jumping while it is under
way, and may give each a fixed virtual duration as well (a store that answers in 0 s is not
one the dispatcher meets, and it would claim one token's worth at a time). Waiting in a test
goes through the clock too (``until``), never through real sleeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import wraps
from typing import ParamSpec, TypeVar

from engine import (
    BUILTIN_KINDS,
    Engine,
    EngineSettings,
    FakeClock,
    LocalLimiter,
    Message,
    NotificationState,
    Provider,
    ProviderConfig,
    ProviderFactory,
    SendResult,
    Store,
)
from engine.providers import FileProvider

__all__ = ["VirtualEngines", "file_kind", "latency_kind", "on_virtual_time", "until"]

QUEUED, LEASED = NotificationState.QUEUED, NotificationState.LEASED
P = ParamSpec("P")
T = TypeVar("T")


def on_virtual_time(store: Store, clock: FakeClock, *, latency_s: float = 0.0) -> Store:
    """Make ``clock`` wait for every call ``store`` makes to its database (reads, writes and
    the statements outside a transaction: the only ways in), and then let each take
    ``latency_s`` of virtual time. Returns ``store``."""
    db = store._db
    for name in ("read", "write", "outside_transaction", "write_in_thread", "write_on_driver"):
        setattr(db, name, _held(clock, latency_s, getattr(db, name)))
    return store


def _held(
    clock: FakeClock, latency_s: float, call: Callable[P, Awaitable[T]]
) -> Callable[P, Awaitable[T]]:
    @wraps(call)
    async def held(*args: P.args, **kwargs: P.kwargs) -> T:
        with clock.busy():
            result = await call(*args, **kwargs)
        if latency_s > 0:
            await clock.sleep(latency_s)
        return result

    return held


async def until(
    clock: FakeClock,
    check: Callable[[], bool | Awaitable[bool]],
    *,
    within_s: float = 60.0,
    step_s: float = 0.01,
    what: str = "the condition",
) -> float:
    """Check every ``step_s`` of virtual time until ``check`` holds; returns the virtual
    seconds that took. Fails after ``within_s`` virtual seconds."""
    start = clock.monotonic()
    while True:
        done = check()
        if done if isinstance(done, bool) else await done:
            return clock.monotonic() - start
        assert clock.monotonic() - start < within_s, f"no {what} after {within_s:g} s"
        await clock.sleep(step_s)


def file_kind(clock: FakeClock) -> ProviderFactory:
    """The 'file' kind with each line's ``ts`` read from ``clock``."""

    def make(config: ProviderConfig) -> Provider:
        return FileProvider(config.name, config.options["path"], clock=clock)

    return make


def latency_kind(clock: FakeClock, latency_s: float) -> ProviderFactory:
    """A kind whose every send takes ``latency_s`` on ``clock`` and is delivered."""

    class Latency:
        def __init__(self, config: ProviderConfig) -> None:
            self.name = config.name

        async def send(self, message: Message) -> SendResult:
            await clock.sleep(latency_s)
            return SendResult.delivered()

        async def aclose(self) -> None:
            """Nothing to release."""

    return Latency


class VirtualEngines:
    """Opens engines on one store and one autojumping clock (their limiters read it too);
    ``close`` closes every one. ``factories`` is added to the built-in provider kinds; each
    store call takes ``store_latency_s`` of virtual time."""

    def __init__(
        self,
        store: Store,
        clock: FakeClock,
        factories: Mapping[str, ProviderFactory] | None = None,
        *,
        store_latency_s: float = 0.0,
    ) -> None:
        self.store = on_virtual_time(store, clock, latency_s=store_latency_s)
        self.clock = clock
        self.factories = {**BUILTIN_KINDS, **(factories or {})}
        self.opened: list[Engine] = []

    async def open(self, settings: EngineSettings | None = None) -> Engine:
        engine = Engine(
            self.store,
            LocalLimiter(self.clock),
            self.factories,
            clock=self.clock,
            settings=settings,
        )
        await engine.open()
        self.opened.append(engine)
        return engine

    async def until_empty(self, engine: Engine, *, within_s: float = 600.0) -> float:
        """Wait until ``engine`` has nothing queued or leased and every outcome is written;
        returns the virtual seconds that took."""

        async def empty() -> bool:
            depth = await engine.store.notifications.depth()
            busy = any(r.count for r in depth if r.state in (QUEUED, LEASED))
            return not busy and not engine.dispatcher.has_pending()

        return await until(self.clock, empty, within_s=within_s, step_s=0.5, what="empty queue")

    async def close(self) -> None:
        for engine in self.opened:
            await engine.close()
