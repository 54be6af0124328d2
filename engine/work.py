"""Leases waiting for a sender: taken in turn over their (tenant, provider) keys.

The dispatcher may lease ahead of its free senders (``DispatcherSettings.prefetch``), so a
few leases can wait here for one. They wait in one line per key, and senders take from the
lines in turn: a lease of a small tenant claimed behind a large tenant's batch waits for the
next free sender, not for the batch. Leases that hold a token (their key has a limit) go
before those leased ahead: a token that waits goes stale.
"""

from __future__ import annotations

import asyncio
import collections

from engine.clock import Clock
from engine.dispatch_settings import DispatcherSettings
from engine.store import Leased

__all__ = ["Entry", "Key", "WorkQueue"]

Key = tuple[int, int]  # (tenant id, provider id)
Entry = tuple[Leased, float]  # a lease and when its token was taken


class WorkQueue:
    """Not thread-safe; one loop. ``get`` returns None when told to (``close_one``)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # One ticket per lease put, or None: a sender exits. A ticket may outlive its lease
        # (``take_provider`` takes leases, not tickets); ``get`` then waits for the next.
        self._tickets: asyncio.Queue[bool | None] = asyncio.Queue()
        # Per key, in turn (the next one first): leases holding a token, then the others.
        self._paced: dict[Key, collections.deque[Entry]] = {}
        self._lines: dict[Key, collections.deque[Entry]] = {}
        self._count = 0
        self.paced = 0  # leases waiting that hold a token
        self._sending: dict[int, float] = {}  # per lease being sent, when its sender took it
        self.send_s: float | None = None  # the sends' mean time, recent ones weighing most

    def __len__(self) -> int:
        return self._count

    @property
    def busy(self) -> int:
        """Senders sending."""
        return len(self._sending)

    @property
    def inflight(self) -> int:
        return self._count + len(self._sending)

    def sent(self, send_s: float) -> None:
        """A send took ``send_s``."""
        mean_s = self.send_s
        self.send_s = send_s if mean_s is None else mean_s + 0.1 * (send_s - mean_s)

    def end(self, lease_id: int) -> None:
        """The sender that took lease ``lease_id`` (from ``get``) is done with it."""
        self._sending.pop(lease_id, None)

    def full(self, settings: DispatcherSettings, concurrency: int) -> bool:
        """No key may lease now, paced or not."""
        return (
            self.room(settings, concurrency, paced=False) <= 0
            and self.room(settings, concurrency, paced=True) <= 0
        )

    def room(self, settings: DispatcherSettings, concurrency: int, *, paced: bool) -> int:
        """How many a key may lease now, at most a batch. Leases ahead of the free
        senders keep claims full (one claim of a batch while the senders work through the
        last): a key that no limit paces may lease ``settings.prefetch`` ahead. A paced key's
        leases hold tokens, which go stale waiting: they go before the others, and while
        others wait it may lease for the senders expected (from the sends' mean time) to
        come free within ``token_lag_s``; else (and with no prefetch) only for the free ones."""
        if not paced:
            return min(concurrency + settings.prefetch - self.inflight, settings.batch)
        free = concurrency - len(self._sending) - self.paced
        if settings.prefetch and self._count > self.paced and self.send_s is not None:
            due = self._clock.monotonic() + settings.token_lag_s - self.send_s
            free += sum(1 for began in self._sending.values() if began <= due)
        return min(free, settings.batch)

    def put(self, key: Key, entry: Entry, *, paced: bool) -> None:
        lines = self._paced if paced else self._lines
        line = lines.get(key)
        if line is None:
            line = lines[key] = collections.deque()
        line.append(entry)
        self._count += 1
        self.paced += paced
        self._tickets.put_nowait(True)

    async def get(self) -> Entry | None:
        """The first lease of the key whose turn it is; that key's turn then passes."""
        while True:
            if await self._tickets.get() is None:
                return None
            if self._count:
                break
        lines = self._paced if self.paced else self._lines
        key = next(iter(lines))
        line = lines.pop(key)
        entry = line.popleft()
        if line:
            lines[key] = line  # to the back of the turn
        self._count -= 1
        self.paced -= lines is self._paced
        self._sending[entry[0].id] = self._clock.monotonic()  # a sender took it
        return entry

    def close_one(self) -> None:
        """The next ``get`` that finds no lease returns None (leases put before it go first)."""
        self._tickets.put_nowait(None)

    def take_all(self) -> list[Leased]:
        """Every lease waiting, removed."""
        lines = [*self._paced.values(), *self._lines.values()]
        taken = [leased for line in lines for leased, _ in line]
        self._paced.clear()
        self._lines.clear()
        self._count = self.paced = 0
        while not self._tickets.empty():
            self._tickets.get_nowait()
        return taken

    def take_provider(self, provider_id: int) -> list[Leased]:
        """The leases waiting for ``provider_id``, removed (its provider asked to wait)."""
        taken: list[Leased] = []
        for lines in (self._paced, self._lines):
            keys = [key for key in lines if key[1] == provider_id]
            found = [leased for key in keys for leased, _ in lines.pop(key)]
            if lines is self._paced:
                self.paced -= len(found)
            taken += found
        self._count -= len(taken)
        return taken
