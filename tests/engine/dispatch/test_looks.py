"""The dispatcher's looks at the kept counts (engine/dispatch/looks.py): their spacing, a read
under way while the live workers change, and the sleep a look asked for allows."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from engine.core.clock import FakeClock
from engine.dispatch.due import DueBook
from engine.dispatch.looks import Looks
from engine.dispatch.settings import DispatcherSettings
from engine.dispatch.share import Shares
from engine.store import Share

PAIR = (1, 1)


class SlowCounts:
    """The store's read of the counts, answering when the test says, ``took_s`` after it was
    asked on the test's clock."""

    def __init__(self, clock: FakeClock, took_s: float) -> None:
        self.clock, self.took_s = clock, took_s
        self.asked = 0

    async def queued_counts(self, share: Share | None = None) -> dict[tuple[int, int], int]:
        self.asked += 1
        self.clock.advance(self.took_s)
        return {PAIR: 3}


def looks_of(clock: FakeClock, counts: SlowCounts, shares: Shares) -> tuple[Looks, DueBook]:
    book = DueBook(cap=1024)
    store: Any = SimpleNamespace(queue=counts)
    directory: Any = SimpleNamespace(enabled=lambda tenant_id: True)
    settings = DispatcherSettings(poll_s=60.0)
    looks = Looks(book, store, shares, directory, clock, settings=settings, wake=asyncio.Event())
    return looks, book


async def test_a_look_comes_no_sooner_than_twenty_times_the_last_one_took() -> None:
    clock = FakeClock()
    counts = SlowCounts(clock, took_s=0.5)
    looks, book = looks_of(clock, counts, Shares("w1"))
    assert looks.due(clock.monotonic())  # the first is asked for
    began = clock.monotonic()
    looks.begin(began)
    await looks.take_in()
    assert book.due == {PAIR: 3}
    looks.ask()
    assert not looks.due(began + 9.9)
    assert looks.wait_s(began + 9.9) == pytest.approx(0.1)
    assert looks.due(began + 10.0)


async def test_workers_that_change_during_a_read_leave_the_looks_going() -> None:
    """The share of the tenants changes while a read is under way: its answer is dropped (it
    was read for the old share), and the next look comes at once; the looks keep their
    spacing from then on (a read timed from the wrong start once stopped them for good)."""
    clock = FakeClock()
    counts = SlowCounts(clock, took_s=0.5)
    shares = Shares("w1")
    looks, book = looks_of(clock, counts, shares)
    looks.begin(clock.monotonic())
    shares.set_workers(["w1", "w2"])
    looks.anew()
    looks.ask()
    await looks.take_in()
    assert book.due == {}  # read for the old share: not taken in
    now = clock.monotonic()
    assert looks.due(now)  # a look of the new share, at once
    looks.begin(now)
    await looks.take_in()
    assert book.due == {PAIR: 3}
    looks.ask()
    began = now
    assert not looks.due(began + 19.9)  # 20 x 0.5 s x 2 workers
    assert looks.due(began + 20.0)
    assert counts.asked == 2


async def test_a_look_asked_for_during_a_read_does_not_shorten_the_sleep() -> None:
    """The read's answer wakes the loop, and the next look cannot begin before it is taken
    in: until then a look asked for sets no deadline (else the loop turned every millisecond
    once the read outlasted the spacing)."""
    clock = FakeClock()
    looks, _book = looks_of(clock, SlowCounts(clock, took_s=0.0), Shares("w1"))
    looks.begin(clock.monotonic())
    looks.ask()
    assert looks.wait_s(clock.monotonic() + 5.0) is None
    await looks.take_in()
    assert looks.wait_s(clock.monotonic()) is not None
