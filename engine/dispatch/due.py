"""The dispatcher's book of (tenant, provider) pairs with work, between its looks at the store.

A multi-tenant store has thousands of pairs, most of them with a little work and no tokens at
any instant. The book keeps each pair in exactly one place, so that a round touches only the
pairs it can serve now and its cost follows the sends, not the pairs:

- **ready**: due work, and tokens as far as the book knows; one line per provider, in turn
  (a pair served goes to the back of its line: round-robin among the provider's tenants);
- **waiting**: due work, but its own buckets (the tenant's, the pair's) grant nothing before
  an instant: a timer heap, not visited before then;
- **parked**: queued rows none of which is due (a retry's back-off), with when the first falls
  due and the queued count the store showed; or drained, to be looked at alone (``probes``).

A provider whose bucket ran dry is held as a whole until it refills: its line is not visited.
Pairs come in from the store's kept counts (``look``), this process's enqueues and requeues, and
other processes' enqueues (``add``, from NOTIFY payloads), never by probing every pair.

Not thread-safe; one loop. Pure bookkeeping: times are given, nothing is awaited.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping

from engine.core.domain import BucketScope
from engine.limits.limiter import Reservation
from engine.store import DuePair

__all__ = ["DueBook", "Pair"]

Pair = tuple[int, int]  # (tenant id, provider id)
LOOK_PART = 5_000  # pairs looked at between two turns of the caller's loop
_LONGEST_WAIT_S = 30.0  # a pair behind a very slow bucket asks again at least this often


class DueBook:
    def __init__(self, cap: int) -> None:
        self._cap = cap  # counts are kept up to this: the dispatcher needs at least a batch
        self.due: dict[Pair, int] = {}  # every ready or waiting pair: rows due, as far as known
        self._lines: dict[int, collections.deque[Pair]] = {}  # provider -> ready pairs, in turn
        self._waiting: list[tuple[float, Pair]] = []  # (monotonic time, pair), lazily deleted
        self._wait_until: dict[Pair, float] = {}  # the live entry of each waiting pair
        self._held: dict[int, float] = {}  # provider -> monotonic time its bucket refills
        # Parked pairs: the queued count the store last showed (None: not seen since parked).
        self._parked: dict[Pair, int | None] = {}
        self._later: list[tuple[float, Pair]] = []  # (wall time, parked pair) its rows fall due
        self._later_at: dict[Pair, float] = {}
        self.probes: set[Pair] = (
            set()
        )  # drained pairs (or capped counts that ran out): look at alone
        self._capped: set[Pair] = set()  # ready or waiting pairs whose count is a floor: maybe more
        self._fresh: set[Pair] = set()  # added since the look under way began: kept by it
        self._looking = False  # a look began and its counts are not in yet
        self._touched: set[Pair] = set()  # served or delayed meanwhile: the book knows better
        self._fresh_probe: set[Pair] = set()  # added or delayed since the probe began

    def __len__(self) -> int:
        """Pairs ready or waiting."""
        return len(self.due)

    # -- pairs coming in --------------------------------------------------------------------

    def add(self, pair: Pair, n: int) -> None:
        """``n`` more rows of ``pair`` are due now (an enqueue, a requeue)."""
        if n <= 0:
            return
        self._fresh.add(pair)
        self._fresh_probe.add(pair)
        known = self.due.get(pair)
        if known is not None:
            self.due[pair] = known + n  # ready or waiting: it keeps its place
            return
        self._unpark(pair)
        self.probes.discard(pair)
        self._ready(pair, n)

    def later(self, pair: Pair, at: float) -> None:
        """A row of ``pair`` falls due at wall time ``at`` (a retry after its back-off)."""
        self._fresh_probe.add(pair)
        if self._looking:
            self._touched.add(pair)
        if pair in self.due:
            self._capped.add(pair)  # served anyway; once its count runs out, looked at alone
            return
        if pair not in self._parked:
            self.probes.discard(pair)
            self._parked[pair] = None
        known = self._later_at.get(pair)
        if known is None or at < known:
            self._later_at[pair] = at
            heapq.heappush(self._later, (at, pair))

    def begin_look(self) -> None:
        """A look at the store's counts starts: pairs added or served from now on are newer
        than it (the dispatcher serves the book while the store reads the counts)."""
        self._fresh = set()
        self._looking = True
        self._touched = set()

    def look(self, queued: Mapping[Pair, int]) -> None:
        """The store's kept counts of queued rows per pair (every pair with some), read since
        ``begin_look``: pairs it does not list have none (unless added since); a parked pair
        whose count is unchanged stays parked; the others are due, as far as the book knows,
        and a short claim corrects it."""
        for _part in self.look_in_parts(queued):
            pass

    def look_in_parts(
        self, queued: Mapping[Pair, int], admit: Callable[[int], bool] | None = None
    ) -> Iterator[None]:
        """``look`` a part at a time: yields after every ``LOOK_PART`` pairs, so that a caller
        lets its loop turn between parts (300,000 pairs at 100,000 tenants); pairs of a tenant
        ``admit`` refuses (a disabled one) count as absent. What comes in between parts is
        what comes in between a read of the counts and its look: a short claim corrects it.
        A pair served or delayed since ``begin_look`` keeps what the book knows: the counts
        were read before its claim or its retry's write (else a pair drained meanwhile would
        come back with rows it no longer has, and a retry waiting for its time be forgotten)."""
        if admit is not None:
            queued = yield from _admitted(queued, admit)
        fresh, self._fresh = self._fresh, set()
        touched, self._touched, self._looking = self._touched, set(), False
        if touched:
            fresh |= touched
        gone = [k for k in self.due if k not in queued and k not in fresh]
        if len(gone) > 16:  # many (the tenants went to another worker): each line once
            self._drop_many(gone)
        else:
            for pair in gone:
                self._drop(pair)
        for pair in [k for k in self._parked if k not in queued and k not in touched]:
            self._unpark(pair)
        self.probes &= queued.keys()
        for index, (pair, n) in enumerate(queued.items()):
            if index % LOOK_PART == LOOK_PART - 1:
                yield
            if n > 0 and pair not in touched:
                self._seen(pair, n)

    def _seen(self, pair: Pair, n: int) -> None:
        """A look found ``n`` rows of ``pair`` queued."""
        if pair in self.due:
            self._count(pair, n)
        elif pair in self._parked:
            seen = self._parked[pair]
            if seen is None:
                self._parked[pair] = n  # the baseline for the next look
            elif n > seen:  # rows came in (or went back to the queue) since
                self._unpark(pair)
                self._ready(pair, n)
        elif pair not in self.probes:
            self._ready(pair, n)

    def begin_probe(self) -> None:
        """A look at the pairs of ``probes`` alone starts."""
        self._fresh_probe = set()

    def probed(self, pairs: Iterable[Pair], found: Iterable[DuePair]) -> None:
        """What a look at ``pairs`` alone found (``found``: those with queued rows), since
        ``begin_probe``; a pair added or delayed meanwhile keeps what that said instead."""
        answers = {(d.tenant_id, d.provider_id): d for d in found}
        fresh, self._fresh_probe = self._fresh_probe, set()
        for pair in pairs:
            self.probes.discard(pair)
            if pair in fresh:
                continue
            answer = answers.get(pair)
            if answer is None:
                self._drop(pair)
                self._unpark(pair)
            elif answer.due > 0:
                self._unpark(pair)
                if pair in self.due:
                    self._count(pair, answer.due)
                else:
                    self._ready(pair, answer.due)
            else:
                self._drop(pair)
                self.later(pair, answer.next_available_at)

    # -- a round ---------------------------------------------------------------------------

    def wake(self, mono: float, wall: float) -> None:
        """Waiting pairs whose instant has come go to the front of their lines, parked ones
        whose rows fell due to the back; held providers whose buckets refilled are let go."""
        waiting, until = self._waiting, self._wait_until
        woken: list[Pair] = []
        while waiting and waiting[0][0] <= mono:
            at, pair = heapq.heappop(waiting)
            if until.get(pair) == at:
                del until[pair]
                woken.append(pair)
        self._rejoin(woken)
        later = self._later
        while later and later[0][0] <= wall:
            at, pair = heapq.heappop(later)
            if self._later_at.get(pair) == at:
                seen = self._parked.get(pair)
                self._unpark(pair)
                self._ready(pair, seen if seen else 1)
                if not seen:
                    self._capped.add(pair)  # a guess: looked at alone once it runs out
        if self._held:
            for provider in [p for p, t in self._held.items() if t <= mono]:
                del self._held[provider]

    def _rejoin(self, woken: list[Pair]) -> None:
        """Pairs that waited for their own buckets back in their lines: to the front, soonest
        first, since their tokens go stale behind pairs that no limit paces; but behind the
        pairs that wait for a held provider's bucket, which take its next tokens in turn, so
        that a tenant whose own bucket refills often does not jump the others every time (the
        provider shared max-min fairly: docs/architecture.md)."""
        held = self._held
        for pair in reversed(woken):
            if pair[1] not in held:
                self._line(pair[1]).appendleft(pair)
        if held:
            for pair in woken:
                if pair[1] in held:
                    self._line(pair[1]).append(pair)

    def lines(self) -> Iterator[tuple[int, collections.deque[Pair]]]:
        """Each provider's line of ready pairs, for the providers with some."""
        return ((p, line) for p, line in self._lines.items() if line)

    def held_for_s(self, provider: int, mono: float) -> float:
        """How long ``provider``'s bucket is held empty (0: not held)."""
        until = self._held.get(provider)
        return 0.0 if until is None or until <= mono else until - mono

    def hold_provider(self, provider: int, until: float) -> None:
        """``provider``'s bucket grants nothing before monotonic ``until``: its line waits."""
        self._held[provider] = until

    def served(self, pair: Pair, leased: int, *, drained: bool) -> None:
        """``pair`` (first in its line, as a rule) leased ``leased`` rows; ``drained``: the
        claim found fewer than it asked for (then it is looked at alone: its rows may fall
        due later). A count that ran out is looked at alone only if it was the cap; an
        exact one leaves nothing known, so the pair is forgotten until the next look, enqueue
        or NOTIFY brings it back (at ten thousand pairs of a row or two each, a probe per send
        would cost more than the send). Otherwise it goes to the back of its line."""
        line = self._lines[pair[1]]
        _take(line, pair)
        if self._looking:
            self._touched.add(pair)
        left = self.due.get(pair, 0) - leased
        if drained or left <= 0:
            self.due.pop(pair, None)
            if drained or pair in self._capped:
                self.probes.add(pair)
            self._capped.discard(pair)
        else:
            self.due[pair] = left
            line.append(pair)

    def wait(self, pair: Pair, until: float) -> None:
        """``pair`` (first in its line or last, just ``served``, as a rule) waits for its own
        buckets until monotonic ``until``."""
        _take(self._lines[pair[1]], pair)
        if pair in self.due:
            self._wait_until[pair] = until
            heapq.heappush(self._waiting, (until, pair))

    def hold(self, pair: Pair, reservation: Reservation, mono: float, poll_s: float) -> bool:
        """``pair``'s buckets granted less than asked at monotonic ``mono``: a provider's
        bucket holds the provider's whole line (at most ``poll_s``; the pair keeps its place),
        the tenant's or the pair's holds the pair alone, until they grant again (at most
        ``_LONGEST_WAIT_S``). Returns whether the provider's did."""
        own_s = None
        provider = False
        for i, bucket in enumerate(reservation.held_by):
            for_s = reservation.held_for_s[i] if i < len(reservation.held_for_s) else 0.0
            if bucket.scope is BucketScope.PROVIDER:
                self._held[pair[1]] = mono + (for_s if for_s < poll_s else poll_s)
                provider = True
            elif own_s is None or for_s > own_s:
                own_s = for_s
        if own_s is None and not reservation.held_by:
            own_s = reservation.wait_s  # the limiter did not say which: the pair waits
        if own_s is not None:  # else held by its provider alone: in place when it refills
            self.wait(pair, mono + (own_s if own_s < _LONGEST_WAIT_S else _LONGEST_WAIT_S))
        return provider

    def drop(self, pair: Pair) -> None:
        """``pair`` has no route (its tenant or provider went): forgotten until it comes again."""
        line = self._lines.get(pair[1])
        if line and line[0] == pair:
            line.popleft()
        self._drop(pair)

    def keep(self, serves: Callable[[Pair, int], bool]) -> None:
        """Forget every pair that ``serves(pair, rows known)`` refuses (this worker's share of the
        tenants changed): at once, in one pass over each line, without a look at the store."""
        gone = [pair for pair, n in self.due.items() if not serves(pair, n)]
        self._drop_many(gone)
        for pair in [k for k, n in self._parked.items() if not serves(k, n or 0)]:
            self._unpark(pair)
        self.probes = {pair for pair in self.probes if serves(pair, 0)}

    def release_waits(self) -> None:
        """Every waiting pair and held provider goes back to its line (a limit changed: the
        instants they wait for were worked out from the old one)."""
        for _at, pair in sorted(self._waiting):
            if self._wait_until.get(pair) == _at:
                self._line(pair[1]).append(pair)
        self._waiting, self._wait_until = [], {}
        self._held.clear()

    def has_ready(self, mono: float) -> bool:
        """Whether some provider not held has a ready pair."""
        return any(line and self.held_for_s(p, mono) == 0 for p, line in self._lines.items())

    def next_wait_s(self, mono: float, wall: float) -> float | None:
        """Until the soonest waiting pair, held provider with ready pairs, or parked row, falls
        due (None: nothing pending)."""
        soonest: float | None = None
        waiting, until, held = self._waiting, self._wait_until, self._held
        while waiting:
            at, pair = waiting[0]
            if until.get(pair) != at:
                heapq.heappop(waiting)  # stale: the pair left the heap since
                continue
            provider_at = held.get(pair[1])
            if provider_at is None or provider_at <= at:
                soonest = at - mono
                break
            # Its provider's bucket is held longer than its own: woken sooner, it would only
            # find the provider empty. It waits for the later of the two.
            heapq.heapreplace(waiting, (provider_at, pair))
            until[pair] = provider_at
        for provider, held_until in held.items():
            if self._lines.get(provider) and (soonest is None or held_until - mono < soonest):
                soonest = held_until - mono
        if self._later and (soonest is None or self._later[0][0] - wall < soonest):
            soonest = self._later[0][0] - wall
        return soonest

    # -- inside ------------------------------------------------------------------------------

    def _line(self, provider: int) -> collections.deque[Pair]:
        line = self._lines.get(provider)
        if line is None:
            line = self._lines[provider] = collections.deque()
        return line

    def _ready(self, pair: Pair, n: int) -> None:
        self._count(pair, n)
        self._line(pair[1]).append(pair)

    def _count(self, pair: Pair, n: int) -> None:
        """``pair``'s due rows from a look or a probe: at most the cap (then maybe more)."""
        if n < self._cap:
            self.due[pair] = n
            self._capped.discard(pair)
        else:
            self.due[pair] = self._cap
            self._capped.add(pair)

    def _drop(self, pair: Pair) -> None:
        """Out of ready and waiting (a line keeps no stale entry: ``served``, ``wait`` and
        ``drop`` take the pair from the front; elsewhere it is removed by value)."""
        self._capped.discard(pair)
        if self.due.pop(pair, None) is None:
            return
        if self._wait_until.pop(pair, None) is None:
            line = self._lines.get(pair[1])
            if line is not None:
                with contextlib.suppress(ValueError):
                    line.remove(pair)

    def _drop_many(self, pairs: list[Pair]) -> None:
        """``_drop`` for each of ``pairs``, with one pass over each line they leave (``_drop``
        removes a pair from the middle of its line by value: a pass per pair, thousands of pairs
        times thousands of places when a worker's share of the tenants changed)."""
        in_line: set[Pair] = set()
        for pair in pairs:
            self._capped.discard(pair)
            if self.due.pop(pair, None) is not None and self._wait_until.pop(pair, None) is None:
                in_line.add(pair)
        for provider in {pair[1] for pair in in_line}:
            line = self._lines.get(provider)
            if line:
                kept = [k for k in line if k not in in_line]
                line.clear()
                line.extend(kept)

    def _unpark(self, pair: Pair) -> None:
        if pair in self._parked:
            del self._parked[pair]
            self._later_at.pop(pair, None)

    def __repr__(self) -> str:
        ready = sum(len(line) for line in self._lines.values())
        return (
            f"DueBook(ready={ready}, waiting={len(self._wait_until)}, parked={len(self._parked)},"
            f" probes={len(self.probes)}, held={len(self._held)})"
        )


def _take(line: collections.deque[Pair], pair: Pair) -> None:
    """Take ``pair`` out of ``line``: at once from either end, where a round finds it."""
    if not line:
        return
    if line[0] == pair:
        line.popleft()
    elif line[-1] == pair:
        line.pop()
    else:
        with contextlib.suppress(ValueError):
            line.remove(pair)


def _admitted(
    queued: Mapping[Pair, int], admit: Callable[[int], bool]
) -> Generator[None, None, dict[Pair, int]]:
    """The entries of ``queued`` whose tenant ``admit`` takes, yielding every ``LOOK_PART``."""
    kept: dict[Pair, int] = {}
    for index, (pair, n) in enumerate(queued.items()):
        if admit(pair[0]):
            kept[pair] = n
        if index % LOOK_PART == LOOK_PART - 1:
            yield
    return kept
