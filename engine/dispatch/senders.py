"""The dispatcher's senders: a pool of delivery tasks that empty its ``WorkQueue``.

Each sender takes a parcel (one pair's leases, each holding a token), sends it through the
pair's provider within the send timeout, lets the provider's circuit and then the retry policy
decide each outcome, and hands the outcomes to the ``Completer``. A provider that asks to wait
(a throttle) or whose circuit opens holds back all its sends, not only this one: its bucket is
blocked and the leases waiting for it are released.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
from collections.abc import Callable, Mapping, Sequence

from engine.core.clock import Clock
from engine.core.domain import EXPIRED_DETAIL, BucketKey, SendResult
from engine.core.errors import OmniPostError
from engine.core.policy import EXPIRED, decide
from engine.dispatch.circuit import Circuits
from engine.dispatch.completer import Completer
from engine.dispatch.directory import Directory, Route
from engine.dispatch.ports import DispatchStore
from engine.dispatch.settings import DispatcherSettings
from engine.dispatch.work import Pair, WorkQueue
from engine.limits.limiter import Limiter
from engine.providers.base import send_parcel
from engine.store import Leased
from engine.telemetry.figures import Telemetry

__all__ = ["Senders"]

log = logging.getLogger(__name__)

_NOT_HERE = SendResult.transient("provider is not available in this worker")  # frozen: shared
_LATE = SendResult.expired(EXPIRED_DETAIL)
# Fresh tokens whose answer came back late are asked for again at most this many times in a
# row (a process held up again and again still sends, late: each late answer spent a token).
_LATE_ANSWERS = 3


class Senders:
    """``resize`` starts senders up to ``concurrency`` (one above it exits when it next finishes
    a parcel); ``drain`` stops them. ``wake`` is set when a round may go on: a sender came
    free while ``starved`` (a round found none), or a probe's outcome may have closed a
    circuit."""

    def __init__(
        self,
        work: WorkQueue,
        store: DispatchStore,
        limiter: Limiter,
        directory: Directory,
        circuits: Circuits,
        completer: Completer,
        telemetry: Telemetry,
        clock: Clock,
        *,
        owner: str,
        settings: DispatcherSettings,
        rng: random.Random,
        wake: asyncio.Event,
        returned: Callable[[Mapping[Pair, int]], None],
    ) -> None:
        self._work = work
        self._store = store
        self._limiter = limiter
        self._dir = directory
        self.circuits = circuits
        self._completer = completer
        self._telemetry = telemetry
        self._clock = clock
        self.owner = owner
        self.settings = settings
        self._rng = rng
        self._wake = wake
        self._returned = returned  # rows given back: due again, counted into the book
        self.concurrency = settings.concurrency
        self.starved = False  # the last round stopped for want of a free sender
        self._tasks: list[asyncio.Task[None]] = []
        self._cancelled: list[Leased] = []  # sends cut short by ``drain``; it returns them

    def resize(self) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        while len(self._tasks) < self.concurrency:
            index = len(self._tasks)
            task = asyncio.create_task(self._loop(index), name=f"omnipost-deliver-{index}")
            self._tasks.append(task)

    async def drain(self) -> None:
        """Return the leases not yet sent, let the sends under way finish (for at most the
        stop timeout), then cancel the rest and return their leases too, unspent: the
        provider may have got them all the same (at least once)."""
        unsent = self._work.take_all()
        busy = [t for t in self._tasks if not t.done()]
        for _ in busy:
            self._work.close_one()
        if unsent:
            await self._store.queue.release(self.owner, unsent)
        if not busy:
            return
        with contextlib.suppress(TimeoutError):
            async with self._clock.timeout(self.settings.stop_timeout_s):
                await asyncio.wait(busy)
        pending = [task for task in busy if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._cancelled:  # given back at once rather than left 'leased' until they expire
            await self._store.queue.release(self.owner, self._cancelled)

    async def _loop(self, index: int) -> None:
        while index < self.concurrency:
            entry = await self._work.get()
            if entry is None:
                return
            parcel, taken_at = entry
            try:
                await self._deliver(parcel, taken_at)
            except asyncio.CancelledError:
                self._cancelled += parcel
                raise
            finally:
                self._work.end(parcel[0].id)
                if self.starved:  # a round waits for this sender
                    self._wake.set()

    async def _deliver(self, parcel: Sequence[Leased], taken_at: float) -> None:
        """Send one parcel (one pair's leases, each with its token), then settle each."""
        first = parcel[0]
        route = self._dir.route((first.tenant_id, first.provider_id))
        record = route.provider if route is not None else None
        results: Sequence[SendResult] = [_NOT_HERE] * len(parcel)
        send_s: float | None = None
        answered_at: float | None = None  # wall time, when the provider answered
        if route is not None:
            parcel, results, send_s, answered_at = await self._send(route, parcel, taken_at)
            if not parcel:
                return
        decisions, throttle_s, circuits = [], 0.0, self.circuits
        # By index rather than ``zip(..., strict=True)``, whose keyword costs a parse per call:
        # ``send_parcel`` gives exactly one outcome per message.
        for i, item in enumerate(parcel):
            result = results[i]
            decision = None
            if not circuits.settled(item, result):  # else nothing for the circuit to do
                probe = not circuits.is_closed(item.provider_id)
                decision = await circuits.after_send(item, result)
                if probe:  # the circuit may have closed: its pairs are served again at once
                    self._wake.set()
            if decision is None:  # not held by the circuit: the retry policy decides
                decision = decide(
                    result,
                    failures=item.failures,
                    max_attempts=item.max_attempts,
                    policy=self.settings.retry,
                    rand=self._rng.random(),
                )
            decisions.append(decision)
            if decision.throttle_s and decision.throttle_s > throttle_s:
                throttle_s = decision.throttle_s
        if throttle_s and record is not None:
            # Every sender of this provider backs off, not only this notification.
            await self._limiter.block(BucketKey.for_provider(record.name), throttle_s)
        if throttle_s or not (circuits.all_closed or circuits.is_closed(first.provider_id)):
            await self._give_back(self._work.take_provider(first.provider_id))
        # The outcomes' time is the provider's answer, not this moment: the process may have
        # been held up since (and a delivery's ``ts - send_s`` is then when it was sent).
        now = answered_at if answered_at is not None else self._clock.wall()
        for i, item in enumerate(parcel):
            self._completer.finished(item, results[i], decisions[i], send_s, now=now)

    async def _send(
        self,
        route: Route,
        parcel: Sequence[Leased],
        taken_at: float,
    ) -> tuple[Sequence[Leased], Sequence[SendResult], float | None, float | None]:
        """Send ``parcel`` through its route: the leases sent (those past their deadline are
        not: they end expired), their results, how long the provider took and when (wall
        time) it answered."""
        parcel = self._expire_late(parcel)
        if not parcel:
            return parcel, [], None, None
        started_s = self._clock.monotonic()
        if started_s - taken_at > self.settings.token_lag_s and route.paced:
            # Fresh tokens (waiting if need be); the stale ones stay spent. They are not lent
            # (``Limiter.reserve_many``), so a refund of them could be bounded only by its own
            # room, and such refunds, overlapping other workers' claims, gave a provider back
            # tokens that all of them together would have lost to its burst (four workers at
            # 10,000 tenants: a 0.1 s window at 1.13 of its bound).
            n = len(parcel)
            self._telemetry.count("stale_tokens", n)
            await self._fresh_tokens(route, n)
            started_s = self._clock.monotonic()
            parcel = self._expire_late(parcel)  # the wait may have taken them past it
            if not parcel:
                return parcel, [], None, None
        tenant_name, provider_name = route.tenant.name, route.provider.name
        now = self._clock.wall()
        messages = [item.message(tenant_name, provider_name, now) for item in parcel]
        timeout_s = self.settings.send_timeout_s
        results = await send_parcel(route.instance, messages, self._clock, timeout_s)
        answered_at = self._clock.wall()
        send_s = self._clock.monotonic() - started_s
        self._work.sent(send_s)
        self._telemetry.observe_send(provider_name, send_s)
        return parcel, results, send_s, answered_at

    async def _fresh_tokens(self, route: Route, n: int) -> None:
        """Take ``n`` tokens for a send that starts now (waiting for them if need be). An
        answer that reached this process more than ``token_lag_s`` after it was asked (the
        process was held up meanwhile: the buckets granted at the ask, the send would start
        now) is as stale as the tokens it replaced: it is spent, and asked again, up to
        ``_LATE_ANSWERS`` times in a row; the send then goes with the last."""
        limiter, clock = self._limiter, self._clock
        lag_s, poll_s = self.settings.token_lag_s, self.settings.poll_s
        late = 0
        while n > 0:
            asked_s = clock.monotonic()
            got = await limiter.reserve(route.buckets, n)
            if got.granted and late < _LATE_ANSWERS and clock.monotonic() - asked_s > lag_s:
                late += 1
                self._telemetry.count("stale_tokens", got.granted)
                continue
            n -= got.granted
            if n:
                await clock.sleep(min(max(got.wait_s, 0.001), poll_s))

    def _expire_late(self, parcel: Sequence[Leased]) -> Sequence[Leased]:
        """The leases of ``parcel`` still inside their deadline; those past it end expired
        here, unsent (their tokens are spent)."""
        now = self._clock.wall()
        for item in parcel:
            if item.expires_at is not None and item.expires_at <= now:
                break
        else:
            return parcel  # nearly always: no deadline, or one still ahead
        live = []
        for item in parcel:
            if item.expires_at is not None and item.expires_at <= now:
                self._completer.finished(item, _LATE, EXPIRED, None, now=now)
            else:
                live.append(item)
        return live

    async def _give_back(self, leases: list[Leased]) -> None:
        """Release leases waiting for a provider that asked to wait (or whose circuit opened):
        queued again, and counted back into the dispatcher's book (else a pair whose count ran
        out meanwhile would wait for the next look at the store)."""
        if not leases:
            return
        try:
            await self._store.queue.release(self.owner, leases)
        except OmniPostError as exc:
            log.warning("%d leases left to expire: %s", len(leases), exc.message)
            return
        due = collections.Counter((item.tenant_id, item.provider_id) for item in leases)
        self._returned(due)

    def __repr__(self) -> str:
        busy = sum(not t.done() for t in self._tasks)
        return f"Senders(concurrency={self.concurrency}, running={busy}, sending={self._work.busy})"
