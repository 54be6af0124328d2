"""The dispatch loop of docs/architecture.md: tokens first, then leases, then deliveries.

1. Know which (tenant, provider) pairs have due work (the kept counts, read while the rounds go
   on: engine/dispatch/looks.py; then a capped index probe per pair: bounded work however deep
   the queue; refreshed on wake-up; this process's own enqueues counted in without a look).
2. Visit them round-robin; for each reserve up to ``batch`` tokens from all its buckets.
3. Lease at most that many; give back the tokens not used.
4. Hand the leases to a fixed pool of delivery tasks (bounded concurrency:
   engine/dispatch/senders.py).
5. With nothing to do, sleep until the next token of a pair with work, a wake-up, or a poll.

A provider whose circuit is open (engine/dispatch/circuit.py) is skipped until its probe is due: one
notification, leased alone; the sleep ends no later than that. Outcomes are written back in
batches by one completer task, fenced on owner and attempt. Every wait (sleeps, back-offs,
the send and stop timeouts) goes through the ``Clock``: tests run all this on virtual time.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence

from engine.core.clock import Clock
from engine.core.domain import NotificationState
from engine.core.errors import OmniPostError, SecretUnreadable
from engine.core.policy import STORE_OUTAGE
from engine.dispatch.circuit import Circuits
from engine.dispatch.claims import QUANTUM, ClaimMaker
from engine.dispatch.completer import Completer
from engine.dispatch.directory import Directory, Route
from engine.dispatch.due import DueBook
from engine.dispatch.looks import Looks
from engine.dispatch.ports import DispatchStore
from engine.dispatch.senders import Senders
from engine.dispatch.settings import DispatcherSettings
from engine.dispatch.share import Shares
from engine.dispatch.work import Pair, WorkQueue
from engine.limits.limiter import Limiter, Reservation
from engine.store import Completion, Leased
from engine.store.counts import DUE_CAP
from engine.telemetry.figures import Telemetry

__all__ = ["Dispatcher", "DispatcherSettings"]

log = logging.getLogger(__name__)

_PROBES_PER_ROUND = 500  # pairs whose count ran out, looked at alone in one round
# The tokens a provider's bucket, found dry, refills for each other worker before this one
# asks it again (``_after_the_others``).
_TURN = 4 * QUANTUM


class Dispatcher:
    """Runs on whatever loop it is started on; installs no signal handlers."""

    def __init__(
        self,
        store: DispatchStore,
        limiter: Limiter,
        directory: Directory,
        telemetry: Telemetry,
        clock: Clock,
        *,
        owner: str,
        settings: DispatcherSettings,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._limiter = limiter
        self._dir = directory
        self._telemetry = telemetry
        self._clock = clock
        self.owner = owner
        self.settings = settings
        self.concurrency = settings.concurrency
        self._rng = rng or random.Random()
        self._work = WorkQueue(clock)  # leases waiting for a sender, as parcels
        self._wake = asyncio.Event()
        self._book = DueBook(DUE_CAP)  # the pairs with work: where each one stands
        self.shares = Shares(owner)  # the tenants this worker serves, among the live workers
        self._beats: list[tuple[str, float]] = []  # the running workers' last heartbeats
        self._beats_ttl_s = 0.0
        self._claims = ClaimMaker(self._book, directory, self._work, clock)
        self._looks = Looks(
            self._book, store, self.shares, directory, clock, settings=settings, wake=self._wake
        )
        self._limits_seen = directory.limits_version
        self._stopping = False
        self._started = False  # senders exist only once ``run`` has started
        probe_lease_s = settings.send_timeout_s + settings.lease_s
        self.circuits = Circuits(store, directory, clock, owner=owner, probe_lease_s=probe_lease_s)
        self._completer = Completer(
            store.queue,
            clock,
            owner=owner,
            batch=settings.completion_batch,
            on_applied=self._account,
        )
        self._senders = Senders(
            self._work,
            store,
            limiter,
            directory,
            self.circuits,
            self._completer,
            telemetry,
            clock,
            owner=owner,
            settings=settings,
            rng=self._rng,
            wake=self._wake,
            returned=self._returned,
        )
        self.delivered = 0
        self.on_wait: Callable[[float], None] | None = None  # tests observe sleeps

    # -- control ----------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return self._work.inflight

    def wake(self) -> None:
        """New work may be there (a notification from another process, a retry): look again."""
        self._looks.ask()
        self._wake.set()

    def enqueued(self, due: Mapping[Pair, int]) -> None:
        """``due[pair]`` rows became due now per pair (this process's enqueues, another's from
        its NOTIFY): counted in without the look at the store that ``wake`` asks for (a count
        off either way only brings the pair's next look alone sooner). Pairs of tenants another
        live worker serves are left to it, unless this one serves them already (deep)."""
        book, shares, enabled = self._book, self.shares, self._dir.enabled
        alone = shares.alone
        for pair, n in due.items():
            if enabled(pair[0]) and (alone or shares.mine(pair[0]) or pair in book.due):
                book.add(pair, n)
        self._wake.set()

    def due_later(self, pairs_at: Mapping[Pair, float]) -> None:
        """Rows of these pairs were queued that fall due at the wall times given (scheduled
        rows queued ahead of their send time): each pair waits in the book until then."""
        book, shares, enabled = self._book, self.shares, self._dir.enabled
        for pair, at in pairs_at.items():
            if enabled(pair[0]) and (shares.alone or shares.mine(pair[0]) or pair in book.due):
                book.later(pair, at)
        if pairs_at:
            self._wake.set()

    def share_out(self, beats: Sequence[tuple[str, float]], ttl_s: float) -> None:
        """The running workers and their last heartbeats (wall s), from the store: this one
        serves its share of the tenants (``engine/dispatch/share.py``) among those whose
        heartbeat is under ``ttl_s`` old by its own clock, checked again before every look, so
        a worker that fell silent leaves the share as soon as it is that old, whenever this
        one next reads the heartbeats."""
        self._beats, self._beats_ttl_s = list(beats), ttl_s
        self._reshare()

    def _reshare(self) -> None:
        """Share the tenants among the workers heard from lately. When that changed, the pairs
        that went to others leave the book at once, and a look at the counts takes those that
        came without waiting out the interval between looks (at 100,000 tenants, a look every
        few seconds: a worker claimed another's pairs and missed its own meanwhile)."""
        since = self._clock.wall() - self._beats_ttl_s
        if self.shares.set_workers([w for w, at in self._beats if at >= since]):
            self._completer.share_of(len(self.shares.workers))
            serves = self.shares.serves
            self._book.keep(lambda pair, n: serves(pair[0], n))
            self._looks.anew()
            self.wake()

    def _returned(self, due: Mapping[Pair, int]) -> None:
        """Leases this worker gave back unsent (a throttle, a circuit): due again, counted in."""
        book = self._book
        for pair, n in due.items():
            book.add(pair, n)
        self._wake.set()

    def concurrency_set(self, n: int) -> None:
        if n < 1:
            raise OmniPostError("concurrency must be at least 1.")
        self.concurrency = self._senders.concurrency = n
        if self._started and not self._stopping:
            self._senders.resize()
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, paused: asyncio.Event) -> None:
        """Dispatch until ``stop_claiming``; waits while ``paused`` is clear."""
        self._started = True
        self._senders.resize()
        outages = 0  # failed rounds in a row
        while not self._stopping:
            if not paused.is_set():
                await paused.wait()
                continue
            # Cleared before the round, not before the sleep: a wake-up that comes while the
            # round awaits the store (a send finished, a new enqueue) must cut the sleep short.
            self._wake.clear()
            try:
                wait_s = await self._step()
            except SecretUnreadable:
                # Not an outage: the keys are wrong (a wrong key file, a key dropped too soon)
                # and trying again will not help. The engine stops and says so; the claim has
                # given back what it leased, for a worker with the right keys.
                raise
            except OmniPostError as exc:
                # The store already retried; it is down for longer. Keep trying, slower, and
                # say so: sends under way finish, their outcomes wait in memory meanwhile.
                outages += 1
                outage_s = STORE_OUTAGE.delay_s(outages)
                self._looks.ask()  # the failed round may have been the look itself
                log.warning("dispatch paused %.1fs: %s", outage_s, exc.message)
                await self._sleep(outage_s)
                continue
            outages = 0
            if wait_s > 0:
                await self._sleep(wait_s)

    def _step(self) -> Awaitable[float]:
        """The next round, after a look at the store when one is due. Returned, not awaited
        here: most rounds need no look, and a plan runs about one round per send."""
        if self._looks.due(self._clock.monotonic()) or self._book.probes:
            return self._look_then_round()
        return self._round()

    async def _look_then_round(self) -> float:
        await self._refresh_due()
        return await self._round()

    def stop_claiming(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _refresh_due(self) -> None:
        """Look at the kept counts when one is due (``engine/dispatch/looks.py``: the store
        reads them while the rounds go on), then at the pairs whose count ran out."""
        if self._beats:
            self._reshare()  # a silent worker's tenants come to the others
        mono = self._clock.monotonic()
        book, looks = self._book, self._looks
        if not looks.reading and looks.due(mono):
            if mono - self.circuits.read_at >= self.settings.health_refresh_s:
                await self.circuits.refresh()
            looks.begin(mono)
        if looks.answered(mono):
            await looks.take_in()
        if book.probes:
            pairs = sorted(book.probes)[:_PROBES_PER_ROUND]
            book.begin_probe()
            rows = await self._store.queue.due_pairs(self._clock.wall(), pairs=pairs)
            book.probed(pairs, rows)

    async def _round(self) -> float:
        """One pass over the providers' lines of ready pairs, each pair at most once; returns
        how long to sleep (0: go again). A held provider's line and a waiting pair cost
        nothing: they are not visited before their buckets grant again."""
        now = self._clock.wall()
        mono = self._clock.monotonic()
        book = self._book
        if self._dir.limits_version != self._limits_seen:
            self._limits_seen = self._dir.limits_version
            book.release_waits()  # a limit changed: what the waits were computed from
        book.wake(mono, now)
        wait_s = self.settings.poll_s
        progressed = False
        self._senders.starved = False
        circuits = self.circuits
        for provider_id, line in list(book.lines()):
            if book.held_for_s(provider_id, mono) > 0:
                continue
            if not (circuits.all_closed or circuits.is_closed(provider_id)):
                blocked_s = circuits.blocked_for_s(provider_id, now)
                if blocked_s > 0:  # its circuit is open; no probe yet, or another worker's
                    wait_s = blocked_s if blocked_s < wait_s else wait_s
                    continue
            probing = not (circuits.all_closed or circuits.is_closed(provider_id))
            visits = len(line)  # each pair at most once a round
            while visits > 0 and line:
                if book.held_for_s(provider_id, self._clock.monotonic()) > 0:
                    break
                if self._work.full(self.settings, self.concurrency):
                    self._senders.starved = True  # a send that ends wakes the loop
                    return 0.0 if progressed else self._round_wait_s(wait_s)
                visited, leased = await self._serve_line(line, probing=probing)
                visits -= visited
                progressed |= leased > 0
                if probing or not visited:
                    break
        if book.probes or (progressed and book.has_ready(self._clock.monotonic())):
            return 0.0  # pairs whose count ran out are looked at before any sleep
        return self._round_wait_s(wait_s)

    def _round_wait_s(self, wait_s: float) -> float:
        """The round's sleep: until the soonest waiting pair, held provider, delayed row or
        due look, at most ``wait_s``, at least 1 ms."""
        mono = self._clock.monotonic()
        soonest = self._book.next_wait_s(mono, self._clock.wall())
        if soonest is not None and soonest < wait_s:
            wait_s = soonest
        look_s = self._looks.wait_s(mono)  # a look asked for waits for its spacing
        if look_s is not None and look_s < wait_s:
            wait_s = look_s
        return wait_s if wait_s > 0.001 else 0.001

    async def _serve_line(self, line: collections.deque[Pair], *, probing: bool) -> tuple[int, int]:
        """Serve the first pairs of one provider's ``line`` together: reserve for each up to
        its ``_room`` (all of them at most what the senders can take), lease for all of them
        in one claim, then take their tokens again. Returns how many pairs it visited and how
        many it leased. Each pair then goes to the back of the line, waits for its own
        buckets, or (drained) is looked at alone; a provider's bucket that ran dry holds the
        whole line. ``probing``: the provider's circuit probe is due: one lease, alone."""
        claims = self._claims
        asks, room, starved = claims.gather(line, self.settings, self.concurrency, probing=probing)
        if starved:
            self._senders.starved = True  # a send that ends wakes the loop
        if not asks:  # no route, or no room
            return 0, 0
        # Lent: the retake below (or a refund) settles every one of them.
        reserved_at = self._clock.monotonic()
        reservations = await self._limiter.reserve_many(
            [(r.buckets, n) for _k, r, n in asks], lent=True
        )
        provider_id = asks[0][0][1]
        caps, kept = claims.within_room(provider_id, asks, reservations, room)
        granted = [i for i, cap in enumerate(caps) if cap > 0]
        if probing and granted and not await self.circuits.take_probe(provider_id):
            await self._limiter.refund(reservations[0], reservations[0].granted)
            self._book.served(asks[0][0], 0, drained=False)  # another worker probes it
            return 1, 0
        claimed = await self._store.queue.claim_many(
            [(*asks[i][0], caps[i]) for i in granted],
            owner=self.owner,
            lease_s=self.settings.lease_s,
            now=self._clock.wall(),
        )
        # Every reservation holding tokens is taken again for what its pair leased: the grants
        # past the room go back in the same call (those pairs lease nothing, or less).
        rows_of = dict(zip(granted, claimed, strict=True))
        telemetry = self._telemetry
        if granted:
            telemetry.count("claims")
        empty = sum(1 for rows in claimed if not rows)
        if empty:
            telemetry.count("claims_empty", empty)
        holding = [i for i, got in enumerate(reservations) if got.granted > 0]
        retaken = await self._retake_many(
            [(reservations[i], rows_of.get(i, [])) for i in holding], reserved_at
        )
        by_ask = dict(zip(holding, retaken, strict=True))
        total = 0
        provider_held = False
        for i, (pair, route, asked) in enumerate(asks):  # in line order: the book's turn
            reservation = reservations[i]
            if i >= kept:  # no room left for it this time: it keeps its place, first in line
                continue
            if caps[i] == 0:
                if not provider_held:  # behind a provider found empty: not its turn yet
                    provider_held = self._book.hold(
                        pair, reservation, self._clock.monotonic(), self.settings.poll_s
                    )
                continue
            got, taken_at = by_ask[i]
            claimed_n = len(rows_of[i])
            held = self._settle(pair, route, asked, reservation, caps[i], claimed_n, got, taken_at)
            provider_held |= held
            if probing:
                await self.circuits.probing(provider_id, got)
            total += len(got)
        if provider_held:
            claims.dry(provider_id)
            self._after_the_others(provider_id, asks[0][1])
        return len(asks), total

    def _after_the_others(self, provider_id: int, route: Route) -> None:
        """The provider's bucket, found dry, is shared with the other live workers (Redis):
        this one comes back once they had a turn at it, when the provider has refilled
        ``_TURN`` tokens for each of them past its next one (at most half the time it takes
        to refill its burst, so no token goes to waste). Else all of them came back at its
        every token, one got it and the others asked for nothing, and claims shrank to the
        token or two a turn got: a claim costs about the same whatever it leases (four
        workers at 1,000 tenants: 2.7-3.3 deliveries a claim, one worker's 4.4), and so does
        a reservation that finds the bucket dry (four workers at 10,000 tenants with turns of
        ``QUANTUM``, 4 tokens: twice one worker's calls to Redis per delivery, and 1.6-1.8
        times its CPU)."""
        workers = len(self.shares.workers)
        limit = route.provider.limit
        if workers <= 1 or limit is None:
            return
        extra_s = (workers - 1) * _TURN / limit.rate_per_s
        most_s = limit.burst / limit.rate_per_s / 2
        mono = self._clock.monotonic()
        held_s = self._book.held_for_s(provider_id, mono) + (
            extra_s if extra_s < most_s else most_s
        )
        poll_s = self.settings.poll_s
        self._book.hold_provider(provider_id, mono + (held_s if held_s < poll_s else poll_s))

    def _settle(
        self,
        pair: Pair,
        route: Route,
        asked: int,
        reservation: Reservation,
        cap: int,
        claimed: int,
        leased: list[Leased],
        taken_at: float,
    ) -> bool:
        """One pair's claim after its reservation (``claimed`` rows of the ``cap`` it might
        lease, of which ``leased`` kept their tokens, taken at ``taken_at``): its parcels
        handed to the senders, its place in the book; returns whether its provider's bucket
        ran dry."""
        # Fewer rows than tokens: none is due now (a retake that fell short released rows
        # that are still due: the pair waits for tokens instead).
        drained = claimed < cap
        self._book.served(pair, len(leased), drained=drained)
        per, paced = route.per, route.paced
        for first in range(0, len(leased), per):  # a parcel of one (the most) is not sliced
            parcel = leased if len(leased) == 1 else leased[first : first + per]
            self._work.put(pair, parcel, taken_at, paced=paced)
        if not drained and (cap < asked or len(leased) < claimed):
            return self._book.hold(
                pair, reservation, self._clock.monotonic(), self.settings.poll_s
            )  # its buckets ran dry
        return False

    async def _retake_many(
        self, claims: list[tuple[Reservation, list[Leased]]], reserved_at: float
    ) -> list[tuple[list[Leased], float]]:
        """Take the tokens again now that the leases are in hand, for every pair of a claim in
        one call; returns per pair the leases that got one (the others are released) and when
        those tokens were taken (at the earliest). The first reservation only says how many
        to lease; the sends go out after the claim, and claims take a varying time, so tokens
        debited before a slow claim would let its sends bunch up with the next quick claim's
        and exceed the envelope. Debited here, the bucket paces the sends themselves; the
        first reservation, lent, is settled here whatever the claim found."""
        if self._clock.monotonic() == reserved_at and not self._limiter.counts_lent:
            # No time passed (a store that answers at once, as the planner's): the tokens
            # taken are the ones a retake would take; only the unused ones go back (a
            # limiter that counts lent tokens must see each reservation retaken).
            unused = [(got, got.granted - len(rows)) for got, rows in claims]
            await self._limiter.refund_many([(got, n) for got, n in unused if n > 0])
            return [(rows, reserved_at) for _got, rows in claims]
        taken_at = self._clock.monotonic()  # the earliest the tokens can be taken
        # A pair that leased nothing takes 0 again: its tokens go back, in the same call.
        nows = await self._limiter.retake_many([(got, len(rows)) for got, rows in claims])
        kept: list[tuple[list[Leased], float]] = []
        released: list[Leased] = []
        for (_got, rows), now in zip(claims, nows, strict=True):
            if now.granted < len(rows):  # another worker or a block took them meanwhile
                released += rows[now.granted :]
                kept.append((rows[: now.granted], taken_at))
            else:
                kept.append((rows, taken_at))
        if released:
            await self._store.queue.release(self.owner, released)
        return kept

    def _sleep(self, wait_s: float) -> Awaitable[bool]:
        """The clock's wait for a wake-up (returned, not awaited here: one layer less a round)."""
        if self.on_wait is not None:
            self.on_wait(wait_s)
        return self._clock.wait_for(self._wake, wait_s)

    # -- completions ------------------------------------------------------------------------

    async def complete_loop(self) -> None:
        """Write outcomes back in batches until cancelled; the last flush happens in ``drain``."""
        await self._completer.run()

    async def flush(self) -> None:
        await self._completer.flush()

    def _account(self, batch: Sequence[Completion], applied: Sequence[bool]) -> None:
        book, now = self._book, self._clock.wall()
        for i, completion in enumerate(batch):  # one answer per completion, by index
            if not applied[i]:
                self._telemetry.count("takeovers")
                continue
            self._telemetry.completed(completion, self._dir.tenants, self._dir.providers)
            if completion.gone:
                self._telemetry.count("gone")
            if completion.state is NotificationState.DELIVERED:
                self.delivered += 1
            elif completion.state is NotificationState.QUEUED:  # counted in: no look needed
                leased = completion.leased
                pair = (leased.tenant_id, leased.provider_id)
                at = completion.available_at
                if at is None or at <= now:
                    book.add(pair, 1)
                else:
                    book.later(pair, at)
                self._wake.set()

    # -- stopping ---------------------------------------------------------------------------

    async def drain(self) -> None:
        """After ``stop_claiming``: return unsent leases, let sends finish, write outcomes."""
        await self._looks.cancel()
        await self._senders.drain()
        await self.flush()

    def has_pending(self) -> bool:
        return bool(self.inflight or len(self._completer))

    def __repr__(self) -> str:
        state = f"concurrency={self.concurrency}, inflight={self.inflight}"
        return f"Dispatcher(owner={self.owner!r}, {state}, pending_writes={len(self._completer)})"
