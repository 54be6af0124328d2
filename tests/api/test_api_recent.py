"""``api.recent.Recent``: a kept value that runs out is read once for every caller that wants
it meanwhile; they share its value or its exception, a caller going away leaves the read to
the others, and a value ``keep`` refuses is handed out but not kept.

``Recent`` reads ``time.monotonic`` itself, so the time-to-live is driven by replacing the
module's ``time`` with a settable one, never by sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from api import recent as recent_module
from api.recent import Recent

TTL_S = 10.0


class _Time:
    """Stands in for the ``time`` module inside ``api.recent``: ``monotonic()`` is ``now``,
    which a test sets, backwards too."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Time:
    fake = _Time()
    monkeypatch.setattr(recent_module, "time", fake)
    return fake


class _Store:
    """A read that counts its calls and, while ``gate`` is clear, waits for it: the callers
    that arrive meanwhile all find it under way."""

    def __init__(self, value: object = "v", error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def read(self) -> object:
        self.calls += 1
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.value


async def _waiting(
    recent: Recent[object], name: str, read: Callable[[], Awaitable[object]], n: int
) -> list[asyncio.Task[object]]:
    """``n`` callers of ``recent.get(name, read)``, each run up to its first wait."""
    tasks = [asyncio.create_task(recent.get(name, read)) for _ in range(n)]
    for _ in range(3):  # the callers start, then the read they share starts
        await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)
    return tasks


async def test_one_read_is_shared_by_the_callers_that_want_it_meanwhile(clock: _Time) -> None:
    recent: Recent[object] = Recent(TTL_S)
    store = _Store(value=["shared"])
    store.gate.clear()
    tasks = await _waiting(recent, "acme", store.read, 5)
    assert store.calls == 1
    store.gate.set()
    values = await asyncio.gather(*tasks)
    assert all(v is store.value for v in values)
    assert store.calls == 1
    # Kept: the next caller is answered without a read; another name is read on its own.
    assert await recent.get("acme", store.read) is store.value
    assert store.calls == 1
    assert await recent.get("beta", store.read) is store.value
    assert store.calls == 2
    assert len(recent) == 2


async def test_an_exception_reaches_every_waiting_caller_and_is_not_kept(clock: _Time) -> None:
    recent: Recent[object] = Recent(TTL_S)
    failure = RuntimeError("the store is down")
    store = _Store(error=failure)
    store.gate.clear()
    tasks = await _waiting(recent, "acme", store.read, 3)
    store.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(o is failure for o in outcomes)
    assert store.calls == 1
    assert len(recent) == 0 and recent.peek("acme") is None
    # Nothing was kept and nothing is under way: the next caller reads again.
    store.error = None
    assert await recent.get("acme", store.read) == "v"
    assert store.calls == 2


async def test_a_value_keep_refuses_is_handed_out_not_kept(clock: _Time) -> None:
    recent: Recent[object] = Recent(TTL_S, keep=lambda value: value is not None)
    store = _Store(value="known")
    assert await recent.get("key", store.read) == "known"
    assert recent.peek("key") == "known"

    clock.now += TTL_S  # run out, and read a value not to keep
    store.value = None
    store.gate.clear()
    tasks = await _waiting(recent, "key", store.read, 3)
    store.gate.set()
    assert await asyncio.gather(*tasks) == [None, None, None]
    assert store.calls == 2
    # Not kept, and the value it replaces is dropped: the next caller reads again.
    assert recent.peek("key") is None and len(recent) == 0
    assert await recent.get("key", store.read) is None
    assert store.calls == 3


async def test_one_caller_cancelled_leaves_the_read_to_the_others(clock: _Time) -> None:
    recent: Recent[object] = Recent(TTL_S)
    store = _Store(value="v")
    store.gate.clear()
    gone, *staying = await _waiting(recent, "acme", store.read, 3)
    gone.cancel()
    await asyncio.sleep(0)
    assert gone.cancelled()
    store.gate.set()
    assert await asyncio.gather(*staying) == ["v", "v"]
    assert store.calls == 1 and recent.peek("acme") == "v"


async def test_the_read_goes_on_when_its_only_caller_is_cancelled(clock: _Time) -> None:
    recent: Recent[object] = Recent(TTL_S)
    store = _Store(value="v")
    store.gate.clear()
    (only,) = await _waiting(recent, "acme", store.read, 1)
    only.cancel()
    await asyncio.sleep(0)
    assert only.cancelled()
    store.gate.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert recent.peek("acme") == "v"
    assert await recent.get("acme", store.read) == "v"
    assert store.calls == 1


# (what, seconds the read takes, seconds from the read's start to the next caller, reads)
TTL_ROWS = [
    ("just read", 0.0, 0.0, 1),
    ("within the ttl", 0.0, TTL_S - 0.001, 1),
    ("at the ttl: run out", 0.0, TTL_S, 2),
    ("long after", 0.0, 3 * TTL_S, 2),
    ("time went backwards", 0.0, -5.0, 1),
    ("a slow read: its age counts from its start", 4.0, TTL_S - 0.001, 1),
    ("a slow read runs out a ttl after its start", 4.0, TTL_S, 2),
]


@pytest.mark.parametrize(
    ("read_s", "later_s", "reads"), [row[1:] for row in TTL_ROWS], ids=[r[0] for r in TTL_ROWS]
)
async def test_time_to_live(clock: _Time, read_s: float, later_s: float, reads: int) -> None:
    recent: Recent[object] = Recent(TTL_S)
    start = clock.now
    calls = 0

    async def read() -> object:
        nonlocal calls
        calls += 1
        clock.now += read_s
        return calls

    assert await recent.get("acme", read) == 1
    clock.now = start + later_s
    assert await recent.get("acme", read) == reads
    assert calls == reads
