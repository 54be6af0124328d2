"""Outcomes written back in batches: the dispatcher's one writer of completions.

Sends finish one at a time; their outcomes wait here a few milliseconds so that several are
written in one transaction, each fenced on owner and attempt by the queue. A failed write is
kept and tried again, slower; if the leases expire meanwhile the fencing refuses them and the
notifications go out again (at least once).
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import Callable, Sequence

from engine.core.clock import Clock
from engine.core.domain import NotificationState, SendResult
from engine.core.errors import OmniPostError
from engine.core.policy import WRITE_RETRY, Decision
from engine.dispatch.ports import DispatchQueue
from engine.store import Completion, Leased

__all__ = ["Completer"]

log = logging.getLogger(__name__)

_GATHER_S = 0.005  # a few more sends may finish meanwhile, to be written together
_MOST_WORKERS = 4  # the gather grows with the live workers up to this many times ``_GATHER_S``
_LEASE_ID = operator.attrgetter("leased.id")  # batches are written in id order

_QUEUED, _EXPIRED = NotificationState.QUEUED, NotificationState.EXPIRED
_PAST_DEADLINE = "expired: its next try would come after its deadline"

Applied = Callable[[Sequence[Completion], Sequence[bool]], None]


class Completer:
    """``add`` an outcome; ``run`` writes them until cancelled; ``flush`` writes what is left.
    ``on_applied(batch, applied)`` hears, per written batch, which completions the fencing
    let through."""

    def __init__(
        self,
        queue: DispatchQueue,
        clock: Clock,
        *,
        owner: str,
        batch: int,
        on_applied: Applied,
    ) -> None:
        self._queue = queue
        self._clock = clock
        self.owner = owner
        self._batch = batch
        self._on_applied = on_applied
        self._done: list[Completion] = []
        # Outcomes wait for a flush: one falls due ``_GATHER_S`` after the first of them (a
        # timer started by ``add``: ``run`` wakes once per flush, not also when they come).
        self._gathering = False
        self._due = False  # the timer has fired; ``run`` has not flushed yet
        self._woken: asyncio.Future[None] | None = None  # what ``run`` waits on
        self._gather_s = _GATHER_S
        self._flushing: asyncio.Future[None] | None = None  # the flush under way; see ``flush``

    def __len__(self) -> int:
        return len(self._done)

    def share_of(self, workers: int) -> None:
        """This worker is one of ``workers`` live ones, and so finishes about a ``workers``-th
        of the sends: it gathers that many times longer (at most ``_MOST_WORKERS`` times), so
        that its batches are as large as one worker's alone. A write costs about the same
        whatever its batch holds: four workers at 10,000 tenants wrote batches of two or three
        outcomes, and the writes cost each delivery four times what they cost one worker."""
        self._gather_s = _GATHER_S * max(1, min(workers, _MOST_WORKERS))

    def add(self, completion: Completion) -> None:
        self._done.append(completion)
        if not self._gathering:
            self._gather()

    def finished(
        self,
        item: Leased,
        result: SendResult,
        decision: Decision,
        send_s: float | None,
        *,
        now: float,
    ) -> None:
        """Add the outcome of sending ``item`` at ``now`` (wall), as ``decision`` says; a retry
        that would come at or after the notification's deadline ends it expired instead."""
        state, detail, again_at = decision.state, result.detail, now + decision.delay_s
        if state is _QUEUED and item.expires_at is not None and again_at >= item.expires_at:
            state, detail = _EXPIRED, f"{_PAST_DEADLINE} ({detail})"
        self._done.append(  # ``add``, written out: once per send
            Completion(  # leased, outcome, state, detail, available_at, spend_attempt, ts,
                item,  # latency_s (enqueue to outcome), send_s, gone: by position, per send
                result.outcome,
                state,
                detail,
                again_at,
                decision.spend_attempt,
                now,
                now - item.enqueued_at,
                send_s,
                result.recipient_gone,
            )
        )
        if not self._gathering:  # the first since the last flush
            self._gather()

    def _gather(self) -> None:
        self._gathering = True
        self._clock.later(self._gather_s, self._fall_due)

    def _fall_due(self) -> None:
        self._due = True
        woken = self._woken
        if woken is not None and not woken.done():
            woken.set_result(None)

    async def run(self) -> None:
        failures = 0  # failed writes in a row
        while True:
            if not self._due:
                self._woken = asyncio.get_running_loop().create_future()
                await self._woken
            self._due = False
            try:
                await self.flush()
            except OmniPostError as exc:
                log.warning("writing outcomes failed, will retry: %s", exc.message)
                failures += 1
                await self._clock.sleep(WRITE_RETRY.delay_s(failures))
                self._gather()  # the outcomes still wait: gathered again, then written
                continue
            failures = 0

    async def flush(self) -> None:
        # One flush at a time: two would write the same batch twice, the second refused
        # row by row and counted as takeovers, and each would then drop a batch. ``run`` and
        # ``drain`` both flush; a second waits for the first to end (shielded: a waiter that
        # is cancelled must not cancel the flush under way), then flushes what is left. A
        # future rather than an ``asyncio.Lock``: a plan flushes about once per two sends,
        # and the lock's layers of calls cost more than the flush of one.
        while self._flushing is not None:
            await asyncio.shield(self._flushing)
        self._flushing = flushing = asyncio.get_running_loop().create_future()
        try:
            while self._done:
                batch = self._done[: self._batch]
                if len(batch) > 1:
                    batch.sort(key=_LEASE_ID)
                applied = await self._queue.complete(batch, worker=self.owner)
                del self._done[: len(batch)]
                self._on_applied(batch, applied)
            self._gathering = False  # all written: the next outcome starts a gather
        finally:
            self._flushing = None
            flushing.set_result(None)

    def __repr__(self) -> str:
        return f"Completer(owner={self.owner!r}, pending={len(self._done)})"
