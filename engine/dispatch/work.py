"""Leases waiting for a sender: taken in turn over their (tenant, provider) pairs.

The dispatcher may lease ahead of its free senders (``DispatcherSettings.ahead``), so a
few leases can wait here for one. They wait in one line per pair, and senders take from the
lines in turn: a lease of a small tenant claimed behind a large tenant's batch waits for the
next free sender, not for the batch. Leases that hold a token (their pair has a limit) go
before those leased ahead: a token that waits goes stale.

A sender takes a parcel: one lease, or for a provider that takes many messages in one call
(``BatchProvider``) up to its ``batch_max`` leases of one pair, sent together. Senders, and
so the room to lease, are counted in parcels.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Sequence

from engine.core.clock import Clock
from engine.dispatch.settings import DispatcherSettings
from engine.store import Leased

__all__ = ["Entry", "Pair", "WorkQueue"]

Pair = tuple[int, int]  # (tenant id, provider id)
# A parcel of one pair's leases and when their tokens were taken.
Entry = tuple[tuple[Leased, ...], float]


class WorkQueue:
    """Not thread-safe; one loop. ``get`` returns None when told to (``close_one``)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # One ticket per parcel put, or None: a sender exits. A ticket may outlive its parcel
        # (``take_provider`` takes parcels, not tickets); ``get`` then waits for the next.
        # An ``asyncio.Queue``'s rules (first come, first woken; one sender woken per ticket),
        # kept by hand: a sender takes one per send, and the queue's layers cost more.
        self._tickets: collections.deque[bool | None] = collections.deque()
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        # Per pair, in turn (the next one first): parcels holding tokens, then the others.
        self._paced: dict[Pair, collections.deque[Entry]] = {}
        self._lines: dict[Pair, collections.deque[Entry]] = {}
        self._count = 0  # parcels waiting
        self.paced = 0  # parcels waiting that hold tokens
        self._leases = 0  # leases waiting
        # Per parcel being sent (by its first lease's id): when its sender took it, its size.
        self._sending: dict[int, tuple[float, int]] = {}
        self._sending_leases = 0
        self.send_s: float | None = None  # the sends' mean time, recent ones weighing most

    def __len__(self) -> int:
        """Parcels waiting."""
        return self._count

    @property
    def busy(self) -> int:
        """Senders sending."""
        return len(self._sending)

    @property
    def inflight(self) -> int:
        """Leases waiting or being sent."""
        return self._leases + self._sending_leases

    def sent(self, send_s: float) -> None:
        """A send took ``send_s``."""
        mean_s = self.send_s
        self.send_s = send_s if mean_s is None else mean_s + 0.1 * (send_s - mean_s)

    def end(self, lease_id: int) -> None:
        """The sender that took the parcel whose first lease is ``lease_id`` (from ``get``) is
        done with it."""
        sending = self._sending.pop(lease_id, None)
        if sending is not None:
            self._sending_leases -= sending[1]

    def full(self, settings: DispatcherSettings, concurrency: int) -> bool:
        """No pair may lease now, paced or not (room is counted in parcels: whatever a pair's
        parcel size, it has room exactly when a pair of single sends has)."""
        if concurrency + settings.ahead > self._count + len(self._sending):
            return False  # room for a pair no limit paces (``room``'s first case), at once
        return self.room(settings, concurrency, paced=True) <= 0

    def room(
        self, settings: DispatcherSettings, concurrency: int, *, paced: bool, per: int = 1
    ) -> int:
        """How many a pair may lease now, at most a batch, for parcels of ``per`` leases.
        Parcels ahead of the free senders keep claims full (one claim of a batch while the
        senders work through the last): a pair that no limit paces may lease
        ``settings.ahead`` parcels ahead (one batch unless ``prefetch`` says otherwise). A
        paced pair's parcels hold tokens, which go stale waiting: they go before the others,
        and while others wait it may lease for the senders expected (from the sends' mean
        time) to come free within ``token_lag_s``; else (and with no prefetch) only for the
        free ones."""
        if not paced:
            free = concurrency + settings.ahead - self._count - len(self._sending)
            return free * per if free * per < settings.batch else settings.batch
        free = concurrency - len(self._sending) - self.paced
        if settings.ahead and self._count > self.paced and self.send_s is not None:
            due = self._clock.monotonic() + settings.token_lag_s - self.send_s
            free += sum(1 for began, _ in self._sending.values() if began <= due)
        return free * per if free * per < settings.batch else settings.batch  # min(), no call

    def put(
        self,
        pair: Pair,
        leases: Sequence[Leased],
        taken_at: float,
        *,
        paced: bool,
    ) -> None:
        """``leases`` of ``pair`` (their tokens taken at ``taken_at``), as one parcel."""
        lines = self._paced if paced else self._lines
        line = lines.get(pair)
        if line is None:
            line = lines[pair] = collections.deque()
        line.append((leases if isinstance(leases, tuple) else tuple(leases), taken_at))
        self._count += 1
        self._leases += len(leases)
        self.paced += paced
        self._tickets.append(True)  # ``_ticket(True)``, written out: once per parcel
        self._wake_next()

    def _ticket(self, ticket: bool | None) -> None:
        """A ticket for the next ``get``: the first sender waiting (if any) is woken for it."""
        self._tickets.append(ticket)
        self._wake_next()

    def _wake_next(self) -> None:
        waiting = self._waiting
        while waiting:
            sender = waiting.popleft()
            if not sender.done():
                sender.set_result(None)
                return

    async def _next_ticket(self) -> bool | None:
        """``asyncio.Queue.get`` on the tickets, cancellation included."""
        tickets = self._tickets
        while not tickets:
            woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(woken)
            try:
                await woken
            except BaseException:
                woken.cancel()
                with contextlib.suppress(ValueError):
                    self._waiting.remove(woken)
                if tickets and not woken.cancelled():  # woken, then cancelled: pass it on
                    self._wake_next()
                raise
        return tickets.popleft()

    async def get(self) -> Entry | None:
        """The first parcel of the pair whose turn it is; that pair's turn then passes."""
        while True:
            if await self._next_ticket() is None:
                return None
            if self._count:
                break
        lines = self._paced if self.paced else self._lines
        pair = next(iter(lines))
        line = lines.pop(pair)
        entry = line.popleft()
        if line:
            lines[pair] = line  # to the back of the turn
        parcel = entry[0]
        self._count -= 1
        self._leases -= len(parcel)
        self.paced -= lines is self._paced
        self._sending[parcel[0].id] = (self._clock.monotonic(), len(parcel))  # a sender took it
        self._sending_leases += len(parcel)
        return entry

    def close_one(self) -> None:
        """The next ``get`` that finds no lease returns None (leases put before it go first)."""
        self._ticket(None)

    def take_all(self) -> list[Leased]:
        """Every lease waiting, removed."""
        lines = [*self._paced.values(), *self._lines.values()]
        taken = [leased for line in lines for parcel, _ in line for leased in parcel]
        self._paced.clear()
        self._lines.clear()
        self._count = self.paced = self._leases = 0
        self._tickets.clear()
        return taken

    def take_provider(self, provider_id: int) -> list[Leased]:
        """The leases waiting for ``provider_id``, removed (its provider asked to wait)."""
        taken: list[Leased] = []
        for lines in (self._paced, self._lines):
            pairs = [pair for pair in lines if pair[1] == provider_id]
            parcels = [parcel for pair in pairs for parcel, _ in lines.pop(pair)]
            if lines is self._paced:
                self.paced -= len(parcels)
            self._count -= len(parcels)
            taken += [leased for parcel in parcels for leased in parcel]
        self._leases -= len(taken)
        return taken
