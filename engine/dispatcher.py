"""The dispatch loop of docs/architecture.md: tokens first, then leases, then deliveries.

1. Know which (tenant, provider) keys have due work (the kept counts, then a capped index
   probe per key: bounded work however deep the queue; refreshed on wake-up; this process's
   own enqueues counted in without a look).
2. Visit them round-robin; for each reserve up to ``batch`` tokens from all its buckets.
3. Lease at most that many; give back the tokens not used.
4. Hand the leases to a fixed pool of delivery tasks (bounded concurrency: engine/senders.py).
5. With nothing to do, sleep until the next token of a key with work, a wake-up, or a poll.

A provider whose circuit is open (engine/circuit.py) is skipped until its probe is due: one
notification, leased alone; the sleep ends no later than that. Outcomes are written back in
batches by one completer task, fenced on owner and attempt. Every wait (sleeps, back-offs,
the send and stop timeouts) goes through the ``Clock``: tests run all this on virtual time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence

from engine.circuit import Circuits
from engine.clock import Clock
from engine.completer import Completer
from engine.directory import Directory
from engine.dispatch_settings import DispatcherSettings
from engine.domain import NotificationState
from engine.due import count_in
from engine.errors import OmniPostError, SecretUnreadable
from engine.limiter import Limiter, Reservation
from engine.policy import STORE_OUTAGE, HeldBuckets, round_robin
from engine.ports import DispatchStore
from engine.senders import Senders
from engine.store import Completion, DueKey, Leased
from engine.telemetry import Telemetry
from engine.work import Key, WorkQueue

__all__ = ["Dispatcher", "DispatcherSettings"]

log = logging.getLogger(__name__)

_NONE = Reservation((), 0)  # nothing reserved: a value, shared, never changed


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
        self._due: dict[Key, DueKey] = {}
        self._keys: list[Key] | None = None  # the keys of _due with work, sorted; None: stale
        self._providers: frozenset[int] = frozenset()  # the providers of ``_keys``
        self._due_stale = True
        self._drained: set[Key] = set()  # keys whose count ran out: looked at again alone
        self._refreshed_at = -1e9
        self._next_due_at = math.inf  # wall time when delayed work (a retry) falls due
        # Monotonic time before which a key's buckets grant nothing (what its last empty
        # reservation said, at most ``poll_s`` ahead): a round does not ask them again sooner.
        self._not_before: dict[Key, float] = {}
        self._last: Key | None = None
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
        )
        self.delivered = 0
        self.on_wait: Callable[[float], None] | None = None  # tests observe sleeps

    # -- control ----------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return self._work.inflight

    def wake(self) -> None:
        """New work may be there (a notification from another process, a retry): look again."""
        self._due_stale = True
        self._wake.set()

    def enqueued(self, due: Mapping[Key, int]) -> None:
        """This process enqueued ``due[key]`` due now per key: counted in without the look at
        the store that ``wake`` asks for (behind a deep backlog it costs more than the
        enqueue; a count off either way only brings the next look sooner)."""
        enabled = {key: n for key, n in due.items() if self._dir.enabled(key[0])}
        if count_in(self._due, enabled, self._clock.wall()):
            self._keys = None  # a key that had no due work has some
        self._wake.set()

    def set_concurrency(self, n: int) -> None:
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
                self._due_stale = True  # the failed round may have been the look itself
                log.warning("dispatch paused %.1fs: %s", outage_s, exc.message)
                await self._sleep(outage_s)
                continue
            outages = 0
            if wait_s > 0:
                await self._sleep(wait_s)

    def _step(self) -> Awaitable[float]:
        """The next round, after a look at the store when one is due. Returned, not awaited
        here: most rounds need no look, and a plan runs about one round per send."""
        if (
            self._due_stale
            or self._clock.monotonic() - self._refreshed_at >= self.settings.poll_s
            or self._clock.wall() >= self._next_due_at
        ):
            return self._look_then_round(None)
        if self._drained:  # only the keys whose count ran out: behind another key's deep
            return self._look_then_round(sorted(self._drained))  # backlog a full look costs more
        return self._round()

    async def _look_then_round(self, keys: list[Key] | None) -> float:
        await self._refresh_due(keys)
        return await self._round()

    def stop_claiming(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _refresh_due(self, keys: list[Key] | None = None) -> None:
        if keys is None:
            self._due_stale = False
            self._refreshed_at = self._clock.monotonic()
            if self._refreshed_at - self.circuits.read_at >= self.settings.health_refresh_s:
                await self.circuits.refresh()
        self._drained = set()
        enabled = [t.id for t in self._dir.tenants.values() if t.enabled]
        rows = await self._store.queue.due_keys(self._clock.wall(), enabled, keys=keys)
        kept = {} if keys is None else {k: v for k, v in self._due.items() if k not in keys}
        self._due = kept | {(r.tenant_id, r.provider_id): r for r in rows}
        self._keys = None
        # _round sleeps until the first of these; the counts must be fresh when it wakes.
        delayed = [r.next_available_at for r in rows if r.due == 0]
        self._next_due_at = min([math.inf if keys is None else self._next_due_at, *delayed])

    async def _round(self) -> float:
        """One pass over the keys with due work; returns how long to sleep (0: go again)."""
        now = self._clock.wall()
        mono = self._clock.monotonic()
        wait_s = self.settings.poll_s
        progressed = False
        if self._keys is None:
            self._keys = sorted(k for k, d in self._due.items() if d.due > 0)
            self._providers = frozenset(k[1] for k in self._keys)
        keys = self._keys
        self._senders.starved = False
        held = HeldBuckets(self._providers)  # found empty this round: the keys behind wait
        order = round_robin(keys, self._last)
        index = 0
        while True:
            # Passed over: keys whose buckets said when they grant again (asking sooner gets
            # nothing), and keys behind a bucket found empty this round.
            index, wait_s = held.skip(order, index, self._not_before, mono, wait_s)
            if index == len(order):
                break
            key = order[index]
            index += 1
            if self._work.full(self.settings, self.concurrency):
                self._senders.starved = True  # a send that ends wakes the loop
                return wait_s if not progressed else 0.0
            if not (self.circuits.all_closed or self.circuits.is_closed(key[1])):
                blocked_s = self.circuits.blocked_for_s(key[1], now)
                if blocked_s > 0:  # its circuit is open; no probe yet, or another worker's
                    wait_s = min(wait_s, blocked_s)
                    continue
            got, key_wait_s, short = await self._serve(key)
            held.note(key, short)
            progressed |= got > 0
            # ``min()``s and ``max()``s written out here and in ``_serve``: builtins.min
            # parses its keyword arguments on every call, and a plan makes these per send.
            wait_s = key_wait_s if key_wait_s < wait_s else wait_s
        # Delayed work seen by the last look; it may have fallen due while the answer came
        # back, and then the next round looks again (``_step``) rather than the next poll.
        due_s = self._next_due_at - now
        wait_s = due_s if due_s < wait_s else wait_s
        if progressed:  # again at once, unless every key it could serve waits for tokens
            return 0.0 if wait_s <= 0 or self._due_stale or self._drained else wait_s
        return wait_s if wait_s > 0.001 else 0.001

    async def _serve(self, key: Key) -> tuple[int, float, Reservation]:
        """Reserve and lease up to its ``_room`` for ``key``; returns how many were leased,
        how long until it can be served again (0: at once), and the reservation (its
        ``held_by``: the round skips the other keys behind those buckets)."""
        route = self._dir.route(key)
        if route is None:
            return 0, self.settings.poll_s, _NONE
        tenant_id, provider_id = key
        due = self._due[key]
        paced, per = route.paced, route.per
        room = self._work.room(self.settings, self.concurrency, paced=paced, per=per)
        if room <= 0:
            self._senders.starved = True
            return 0, self.settings.poll_s, _NONE
        circuits = self.circuits  # not closed: its probe is due (else the round passed it)
        probing = not (circuits.all_closed or circuits.is_closed(provider_id))
        reserved_at = self._clock.monotonic()
        asked = 1 if probing else (room if room < due.due else due.due)
        reservation = await self._limiter.reserve(route.buckets, asked)
        if reservation.granted == 0:
            wait_s = reservation.wait_s
            wait_s = wait_s if wait_s < self.settings.poll_s else self.settings.poll_s
            self._not_before[key] = self._clock.monotonic() + wait_s
            return 0, reservation.wait_s, reservation
        if probing and not await self.circuits.take_probe(provider_id):
            await self._limiter.refund(reservation, reservation.granted)
            return 0, self.settings.poll_s, reservation  # another worker probes it
        claimed = await self._store.queue.claim(
            tenant_id,
            provider_id,
            reservation.granted,
            owner=self.owner,
            lease_s=self.settings.lease_s,
            now=self._clock.wall(),
        )
        if len(claimed) == reservation.granted and self._clock.monotonic() == reserved_at:
            leased, taken_at = claimed, reserved_at  # ``_retake``'s answer, without its call
        else:
            leased, taken_at = await self._retake(reservation, claimed, reserved_at)
        if probing:
            await self.circuits.probing(provider_id, leased)
        left = due.due - len(leased) if len(leased) == reservation.granted else 0
        self._due[key] = DueKey(tenant_id, provider_id, left, due.next_available_at)
        if left == 0:
            self._drained.add(key)  # drained, or the count was off: look again next round
            self._keys = None
        self._last = key
        for first in range(0, len(leased), per):  # a parcel of one (the most) is not sliced
            parcel = leased if len(leased) == 1 else leased[first : first + per]
            self._work.put(key, parcel, taken_at, paced=paced)
        if left and reservation.granted < asked:  # its buckets ran dry: not before they refill
            wait_s = reservation.wait_s
            wait_s = wait_s if wait_s < self.settings.poll_s else self.settings.poll_s
            self._not_before[key] = self._clock.monotonic() + wait_s
            return len(leased), wait_s, reservation
        return len(leased), 0.0 if left else self.settings.poll_s, reservation

    async def _retake(
        self, reservation: Reservation, claimed: list[Leased], reserved_at: float
    ) -> tuple[list[Leased], float]:
        """Take the tokens again now that the leases are in hand; returns the leases that got
        one (the others are released) and when those tokens were taken (at the earliest). The
        first reservation only says how many to lease; the sends go out after the claim, and
        claims take a varying time, so tokens debited before a slow claim would let its sends
        bunch up with the next quick claim's and exceed the envelope. Debited here, the bucket
        paces the sends themselves."""
        if self._clock.monotonic() == reserved_at:
            # No time passed (a store that answers at once, as the planner's): the tokens
            # taken are the ones a retake would take; only the unused ones go back.
            if len(claimed) < reservation.granted:
                await self._limiter.refund(reservation, reservation.granted - len(claimed))
                self._not_before.clear()
            return claimed, reserved_at
        if len(claimed) < reservation.granted:
            self._not_before.clear()  # tokens go back that other keys may take now
        taken_at = self._clock.monotonic()  # the earliest the tokens can be taken
        if not claimed:
            await self._limiter.refund(reservation, reservation.granted)
            return claimed, taken_at
        now = await self._limiter.retake(reservation, len(claimed))  # one step, one trip
        if now.granted < len(claimed):  # another worker or a block took them meanwhile
            await self._store.queue.release(self.owner, claimed[now.granted :])
        return claimed[: now.granted], taken_at

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
        requeued = False
        for i, completion in enumerate(batch):  # one answer per completion, by index
            if not applied[i]:
                self._telemetry.count("takeovers")
                continue
            self._telemetry.completed(completion, self._dir.tenants, self._dir.providers)
            if completion.state is NotificationState.DELIVERED:
                self.delivered += 1
            requeued |= completion.state is NotificationState.QUEUED
        if requeued:
            self.wake()

    # -- stopping ---------------------------------------------------------------------------

    async def drain(self) -> None:
        """After ``stop_claiming``: return unsent leases, let sends finish, write outcomes."""
        await self._senders.drain()
        await self.flush()

    def has_pending(self) -> bool:
        return bool(self.inflight or len(self._completer))

    def __repr__(self) -> str:
        state = f"concurrency={self.concurrency}, inflight={self.inflight}"
        return f"Dispatcher(owner={self.owner!r}, {state}, pending_writes={len(self._completer)})"
