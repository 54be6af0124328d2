"""The dispatcher's looks at the store's kept counts: step 1 of docs/architecture.md's loop.

A look reads a row per pair with work (with other workers: the pairs of this one's tenants,
and the deep ones), so looks come no closer together than 20 times what the last one took (a
twentieth of the loop, whatever the tenants), times the live workers: each look reads every
pair's row in the store (its share is picked there), so the workers' looks together take a
twentieth of the store's time (four idle workers at 10,000 tenants: their looks had cost
Postgres a quarter of a core). Past that spacing a look comes when asked for (a wake-up) or
when the poll interval has passed.

The store reads the counts while the dispatcher's rounds go on serving the book: at 100,000
tenants a read takes a second or two, and stopping the claims for it let the senders run dry
(a second of no deliveries in every look). The answer is taken in at the dispatcher's first
step after it came, or at once when no pair is ready to be served meanwhile; a pair served or
delayed meanwhile keeps what the book knows (``DueBook.look_in_parts``).
"""

from __future__ import annotations

import asyncio

from engine.core.clock import Clock
from engine.dispatch.directory import Directory
from engine.dispatch.due import DueBook, Pair
from engine.dispatch.ports import DispatchStore
from engine.dispatch.settings import DispatcherSettings
from engine.dispatch.share import Shares

__all__ = ["Looks"]

_SPACING = 20  # looks come no closer together than this many times what the last one took


class Looks:
    """When a look is due (``due``), its read under way (``begin``), and taking it in
    (``take_in``). ``wake`` is set when a read has answered."""

    def __init__(
        self,
        book: DueBook,
        store: DispatchStore,
        shares: Shares,
        directory: Directory,
        clock: Clock,
        *,
        settings: DispatcherSettings,
        wake: asyncio.Event,
    ) -> None:
        self._book = book
        self._store = store
        self._shares = shares
        self._dir = directory
        self._clock = clock
        self.settings = settings  # its poll interval
        self._wake = wake
        self.stale = True  # a look is asked for
        self._at = -1e9  # when the last one began (monotonic), for the spacing
        self._began = 0.0  # when the one under way began, to time it
        self._took_s = 0.0  # how long the last one took, its read and its taking in
        self._read: asyncio.Task[dict[Pair, int]] | None = None  # while under way
        self._workers: tuple[str, ...] = ()  # the live workers when it began

    @property
    def reading(self) -> bool:
        return self._read is not None

    def ask(self) -> None:
        """New work may be there: look again, once the spacing allows."""
        self.stale = True

    def anew(self) -> None:
        """The share of the tenants changed: the next look need not wait out the spacing (a
        read under way is still timed from its own start)."""
        self._at = -1e9

    def due(self, mono: float) -> bool:
        """A look is due (asked for, or the poll interval passed, and spaced enough), or the
        read under way has answered and waits to be taken in."""
        if self._read is not None:
            return self._read.done()
        since_s = mono - self._at
        if since_s < self._spacing_s():
            return False
        return self.stale or since_s >= self.settings.poll_s

    def _spacing_s(self) -> float:
        workers = len(self._shares.workers)
        return _SPACING * self._took_s * (workers if workers > 1 else 1)

    def begin(self, mono: float) -> None:
        """Start a look: the store reads the counts of this worker's share meanwhile."""
        self.stale = False
        self._at = self._began = mono
        self._book.begin_look()
        self._workers = self._shares.workers
        read = asyncio.create_task(
            self._store.queue.queued_counts(self._shares.share), name="omnipost-look"
        )
        read.add_done_callback(self._answered)
        self._read = read

    def _answered(self, read: asyncio.Task[dict[Pair, int]]) -> None:
        """The read ended: the loop takes it in at its next step. One that failed does not
        wake it: its next step meets the error (and backs off), as it would have."""
        if not read.cancelled() and read.exception() is None:
            self._wake.set()

    def answered(self, mono: float) -> bool:
        """The read under way is to be taken in now: it answered, or no pair is ready to be
        served while it goes on (then it is awaited)."""
        read = self._read
        return read is not None and (read.done() or not self._book.has_ready(mono))

    async def take_in(self) -> None:
        """Await the read under way and give its counts to the book (unless the live workers
        changed since it began: a look of the new share is due). Raises what the read raised."""
        read, self._read = self._read, None
        if read is None:
            return
        queued = await read
        if self._workers == self._shares.workers:
            for _part in self._book.look_in_parts(queued, self._dir.enabled):
                await asyncio.sleep(0)  # 300,000 pairs at 100,000 tenants: the loop turns
        self._took_s = self._clock.monotonic() - self._began

    def wait_s(self, mono: float) -> float | None:
        """Until a look asked for may begin (None: none is asked for, or one is under way: its
        answer wakes the loop, and the next cannot begin before it is taken in)."""
        if not self.stale or self._read is not None:
            return None
        return self._at + self._spacing_s() - mono

    async def cancel(self) -> None:
        """Stop the read under way, which no round will take in (the dispatcher stops)."""
        read, self._read = self._read, None
        if read is not None:
            read.cancel()
            await asyncio.gather(read, return_exceptions=True)
