"""How the dispatcher puts one claim together: which pairs of a provider's line it serves, how
many each asks for, and how many each may lease once their buckets answered.

A claim costs about the same whatever it leases, so at many tenants it should serve many pairs;
yet a pair must not take the turns of the pairs behind it, and asks its buckets cannot grant are
work for nothing. So, for the first pairs of a line (at most ``PAIRS_PER_CLAIM``):

- each asks for its due rows, within its **turn**: for a paced pair in a line longer than one
  claim serves, the senders' room shared by the pairs of its line (``QUANTUM`` at least), so a
  tenant with a deep backlog and tokens to spare takes a turn, not the turns of thousands of
  small ones; in a short line, or for a pair no limit paces, the whole room (smaller asks there
  only made more claims, and sends that bunched a little more at the provider);
- pairs are added until what their buckets are expected to grant fills the room: the **share**
  of their asks that the pairs' own buckets granted lately, per provider (a hundred tenants whose
  buckets grant a token or two at a time share a claim), or, while a provider's bucket found
  dry has not had time to refill, what it can have refilled;
- once the buckets answered, the grants past the room are cut, the last pairs' first
  (``within_room``): those pairs keep their places, and their tokens go back with the retakes.

Pure bookkeeping over the dispatcher's parts; nothing is awaited. Not thread-safe; one loop.
"""

from __future__ import annotations

import collections
import itertools

from engine.core.clock import Clock
from engine.core.domain import BucketScope
from engine.dispatch.directory import Directory, Route
from engine.dispatch.due import DueBook
from engine.dispatch.settings import DispatcherSettings
from engine.dispatch.work import Pair, WorkQueue
from engine.limits.limiter import Reservation

__all__ = ["PAIRS_PER_CLAIM", "QUANTUM", "Ask", "ClaimMaker"]

PAIRS_PER_CLAIM = 32  # pairs of one provider's line served by one claim (8 to 128 measured)
QUANTUM = 4  # the least a paced pair may lease in its turn, however long its line

Ask = tuple[Pair, Route, int]  # a pair, its route, how many to reserve and lease


class ClaimMaker:
    def __init__(self, book: DueBook, directory: Directory, work: WorkQueue, clock: Clock) -> None:
        self._book = book
        self._dir = directory
        self._work = work
        self._clock = clock
        # Per provider: the share of what its pairs asked for that their own buckets granted.
        self._granted_share: dict[int, float] = {}
        # Per provider: when its bucket was last found dry (monotonic s).
        self._dry_at: dict[int, float] = {}

    def gather(
        self,
        line: collections.deque[Pair],
        settings: DispatcherSettings,
        concurrency: int,
        *,
        probing: bool,
    ) -> tuple[list[Ask], int, bool]:
        """The first pairs of ``line`` to serve together and how many each asks for (see the
        module), all paced or none, the room the senders leave for them, and whether a pair
        found no room (a send that ends must wake the loop). Paced pairs without room keep
        their places (first served once the senders free up) while pairs no limit paces behind
        them may go; none with room: nothing, and the line waits for a send to end (visiting
        every pair of a long line in turn to find it full would cost a round per pair).
        ``probing``: one pair, one lease (a circuit's probe)."""
        book = self._book
        asks: list[Ask] = []
        dropped: list[Pair] = []
        expected = 0.0
        room = turn = fill = 0
        share = 1.0
        starved = False
        for pair in itertools.islice(line, 1 if probing else PAIRS_PER_CLAIM):
            route = self._dir.route(pair)
            if route is None:
                dropped.append(pair)
                continue
            if asks and route.paced is not asks[0][1].paced:
                break  # paced pairs' leases go before the others': not in one claim with them
            if not asks:
                room = self._work.room(settings, concurrency, paced=route.paced, per=route.per)
                if room <= 0:
                    starved = True
                    if route.paced:
                        continue  # it keeps its place; a pair further on may be unpaced
                    break
                share = self._granted_share.get(pair[1], 1.0)
                share = share if share > 1 / PAIRS_PER_CLAIM else 1 / PAIRS_PER_CLAIM
                fill = self._provider_can_grant(pair[1], route, room)
                turn = room // len(line) if route.paced and len(line) > PAIRS_PER_CLAIM else room
                turn = turn if turn > QUANTUM else QUANTUM
                turn = turn if turn < room else room
            due = book.due[pair]
            asked = 1 if probing else (turn if turn < due else due)
            asks.append((pair, route, asked))
            expected += asked * share
            if expected >= fill:
                break
        for pair in dropped:
            book.drop(pair)
        return asks, room, starved

    def within_room(
        self, provider_id: int, asks: list[Ask], reservations: list[Reservation], room: int
    ) -> tuple[list[int], int]:
        """How many each pair may lease: its grant, within ``room``, the last pairs' cut first
        (``asks`` of a pair cut short become what it may lease: it was not held short by its
        buckets); and how many of the pairs got a turn (those after it had no room left: they
        keep their places). Learns the share of what the provider's pairs asked that their own
        buckets granted (a provider's bucket that held them short says nothing of theirs)."""
        asked = granted = total = 0
        for i, got in enumerate(reservations):
            total += got.granted
            if not any(b.scope is BucketScope.PROVIDER for b in got.held_by):
                asked += asks[i][2]
                granted += got.granted
        if asked:
            share = self._granted_share.get(provider_id, 1.0)
            self._granted_share[provider_id] = share + 0.3 * (granted / asked - share)
        caps = [got.granted for got in reservations]
        if total <= room:
            return caps, len(asks)
        kept = len(asks)
        for i, cap in enumerate(caps):
            if room >= cap:
                room -= cap
                continue
            if room == 0 and kept == len(asks):
                kept = i
            pair, route, _asked = asks[i]
            asks[i] = (pair, route, room)
            caps[i], room = room, 0
        return caps, kept

    def dry(self, provider_id: int) -> None:
        """The provider's bucket held a claim's pairs short just now."""
        self._dry_at[provider_id] = self._clock.monotonic()

    def _provider_can_grant(self, provider_id: int, route: Route, room: int) -> int:
        """At most ``room``: fewer while the provider's bucket, found dry lately, has not had
        the time to refill that many (as far as its own rate says; on Redis other workers
        take from it too): at a provider that holds every line, a claim of many pairs would
        ask them all, and the provider would grant the first one or two."""
        dry_at = self._dry_at.get(provider_id)
        limit = route.provider.limit
        if dry_at is None or limit is None:
            return room
        refilled = (self._clock.monotonic() - dry_at) * limit.rate_per_s
        if refilled >= room:
            return room
        return int(refilled) + 1

    def __repr__(self) -> str:
        shares = ", ".join(f"{p}: {s:.2f}" for p, s in sorted(self._granted_share.items()))
        return f"ClaimMaker(granted_share={{{shares}}}, dry={sorted(self._dry_at)})"
