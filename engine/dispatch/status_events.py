"""The courier: status events from the outbox to the tenants' endpoints.

It runs beside the dispatcher in every worker and shares none of its senders, so a slow or dead
endpoint never slows a send. Events are leased as notifications are (a claim that several
workers share, a lease that a dead worker's reaper gives back, a finish fenced on the try),
each endpoint's pace is its own bucket in the engine's limiter (``BucketKey.for_endpoint``:
local, or in Redis shared by every worker), and each try is signed afresh (Standard Webhooks:
same ``webhook-id`` on every try, a new timestamp and signature). Retries wait
``EVENT_RETRY_S`` (or the endpoint's ``Retry-After``), then the event is given up; a ``410``
disables the endpoint at once, failing every try for ``disable_after_s`` disables it too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.clock import Clock
from engine.core.domain import BucketKey, Limit
from engine.core.errors import OmniPostError, SecretUnreadable
from engine.core.present import rfc3339
from engine.core.status_events import EVENT_RETRY_S, event_body, signed_headers
from engine.limits.limiter import Limiter, take_waiting
from engine.store import Store
from engine.store.endpoints import EndpointSecrets
from engine.store.status_events import DueEvent, TryEnd
from engine.telemetry.figures import Telemetry

if TYPE_CHECKING:  # the HTTP machinery loads when a courier first posts
    from engine.providers.endpoint_post import EndpointPoster, PostAnswer

__all__ = ["Courier", "CourierSettings", "Post", "event_data"]

log = logging.getLogger(__name__)

# url, body, headers, allow_private -> the answer
Post = Callable[[str, bytes, Mapping[str, str], bool], Awaitable["PostAnswer"]]
_MOST_RETRY_AFTER_S = 36_000.0
_ENDS_AT_ONCE = 256  # tries' ends written in one transaction
_GATHER_ENDS_S = 0.5  # how long the first end waits for others to share its write


@dataclass(frozen=True, slots=True)
class CourierSettings:
    concurrency: int = 16  # posts at once, apart from the dispatcher's senders
    per_endpoint: int = 4  # posts at once to one endpoint: a slow one holds no more slots
    batch: int = 128  # events leased ahead of the posts
    lease_s: float = 30.0  # renewed while a post is under way; the engine sets its own
    poll_s: float = 1.0  # longest sleep with nothing due
    reap_s: float = 10.0
    # An endpoint's pace unless it has its own.
    endpoint_limit: Limit = field(default_factory=lambda: Limit(50.0, 100.0))
    disable_after_s: float = 5 * 86400.0  # an endpoint failing every try this long is disabled
    secrets_refresh_s: float = 0.0  # endpoints read again at most this often (0: every claim)
    retry_s: tuple[float, ...] = EVENT_RETRY_S  # the waits before each retry; then given up


class Courier:
    def __init__(
        self,
        store: Store,
        limiter: Limiter,
        clock: Clock,
        owner: str,
        *,
        settings: CourierSettings | None = None,
        post: Post | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._store = store
        self._limiter = limiter
        self._clock = clock
        self.owner = owner
        self.settings = settings or CourierSettings()
        self._poster: EndpointPoster | None = None  # made on the first post, without ``post``
        self._post = post or self._default_post
        self._endpoints: dict[int, EndpointSecrets] = {}
        self._read_at = -1e18
        self._limits: dict[BucketKey, Limit] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(self.settings.concurrency)
        self._lanes: dict[int, asyncio.Semaphore] = {}  # by endpoint id
        self._tasks: set[asyncio.Task[None]] = set()
        self._roomy = asyncio.Event()  # set when at most half of ``batch`` events are held
        self._telemetry = telemetry
        self.delivered = 0
        self.failed = 0  # tries that failed
        self.failures: Counter[str] = Counter()  # failed tries by answer: "503", "no answer"
        self.disabled: list[tuple[int, str]] = []  # (endpoint, why) this courier disabled
        self._ends: list[TryEnd] = []  # tries that ended, not written yet
        self._writer: asyncio.Future[None] | None = None

    async def _default_post(
        self, url: str, body: bytes, headers: Mapping[str, str], allow_private: bool
    ) -> PostAnswer:
        if self._poster is None:
            from engine.providers.endpoint_post import EndpointPoster

            self._poster = EndpointPoster(connections=self.settings.concurrency)
        return await self._poster.post(url, body, headers, allow_private=allow_private)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Claim and post until cancelled; a store hiccup is logged and tried again. Idle, it
        reads when the soonest event falls due (the first entry of an index) and claims only
        then: no write while nothing is due. Busy, it claims again once half of what it holds
        is done: a claim for a few at a time would cost a write transaction each."""
        renewing = asyncio.ensure_future(self._renew_leases())
        next_reap = self._clock.monotonic()
        try:
            while True:
                wait_s = self.settings.poll_s
                self._wake.clear()  # before the reads: a wake-up after them ends the wait
                try:
                    if self._clock.monotonic() >= next_reap:
                        next_reap = self._clock.monotonic() + self.settings.reap_s
                        await self._store.status_events.reap(self._clock.wall())
                    await self._room()
                    due_at = await self._store.status_events.next_due()
                    if due_at is not None and due_at <= self._clock.wall():
                        if await self.step():
                            continue
                    elif due_at is not None:
                        wait_s = min(wait_s, due_at - self._clock.wall())
                except OmniPostError as exc:
                    log.warning("status events: %s", exc.message)
                await self._clock.wait_for(self._wake, wait_s)
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            await self.drain()
            if self._poster is not None:
                await self._poster.aclose()

    async def _room(self) -> None:
        """Wait until at most half of ``batch`` events are held (posting or waiting to): one
        wake-up then, not one per post done."""
        while len(self._tasks) > self.settings.batch // 2:
            self._roomy.clear()
            await self._roomy.wait()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if len(self._tasks) <= self.settings.batch // 2:
            self._roomy.set()

    async def _renew_leases(self) -> None:
        """Keep the leases of the events held alive (a post may wait for tokens, or take its
        15 s), a third of a lease at a time."""
        every_s = self.settings.lease_s / 3
        while True:
            await self._clock.sleep(every_s)
            if not self._tasks:
                continue
            try:
                await self._store.status_events.renew(
                    self.owner, now=self._clock.wall(), lease_s=self.settings.lease_s
                )
            except OmniPostError as exc:
                log.warning("status events: %s", exc.message)

    async def step(self) -> int:
        """One claim of up to the room left in ``batch``, its posts started (each waits for a
        post slot, ``concurrency`` of them, and its endpoint's token); returns how many were
        claimed."""
        room = self.settings.batch - len(self._tasks)
        if room <= 0:
            return 0
        due = await self._store.status_events.claim(
            self.owner,
            now=self._clock.wall(),
            lease_s=self.settings.lease_s,
            limit=room,
        )
        if not due:
            return 0
        await self._know({e.endpoint_id for e in due})
        for event in due:
            task = asyncio.ensure_future(self._deliver(event))
            self._tasks.add(task)
            task.add_done_callback(self._done)
        return len(due)

    async def drain(self) -> None:
        """Let the posts under way finish and their ends be written (their leases would
        expire otherwise)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _know(self, endpoint_ids: set[int]) -> None:
        """Read the endpoints of a claim (their URL, secrets and pace) when not read within
        ``secrets_refresh_s``: a rotated secret signs from the next claim on."""
        stale = self._clock.monotonic() - self._read_at > self.settings.secrets_refresh_s
        wanted = endpoint_ids if stale else endpoint_ids - self._endpoints.keys()
        if not wanted:
            return
        try:
            found = await self._store.endpoints.secrets(sorted(wanted), self._clock.wall())
        except SecretUnreadable as exc:
            log.error("status events: %s", exc.message)
            return
        for gone in wanted - found.keys():
            self._endpoints.pop(gone, None)
        self._endpoints.update(found)
        self._read_at = self._clock.monotonic()
        limits = []
        for endpoint in found.values():
            key = BucketKey.for_endpoint(endpoint.tenant, endpoint.id)
            limit = self.settings.endpoint_limit
            if endpoint.rate_per_s is not None:
                limit = Limit(endpoint.rate_per_s, endpoint.burst or max(1.0, endpoint.rate_per_s))
            if self._limits.get(key) != limit:
                self._limits[key] = limit
                limits.append((key, limit))
        if limits:
            await self._limiter.configure_many(limits)

    async def _deliver(self, event: DueEvent) -> None:
        lane = self._lanes.get(event.endpoint_id)
        if lane is None:
            lane = self._lanes[event.endpoint_id] = asyncio.Semaphore(self.settings.per_endpoint)
        async with lane, self._slots:
            try:
                end = await self._try(event)
            except Exception:
                log.exception("status event %d failed", event.id)  # its lease expires
                return
        if end is not None:
            self._ended(end)

    async def _try(self, event: DueEvent) -> TryEnd | None:
        """Post ``event`` once its endpoint's bucket allows; how the try ended (None: its
        endpoint was removed since, and its events with it)."""
        endpoint = self._endpoints.get(event.endpoint_id)
        if endpoint is None:
            return None
        if not endpoint.enabled:  # disabled since the claim: held as soon as it is written
            return TryEnd(event, False, self._clock.wall(), None, "")
        key = BucketKey.for_endpoint(endpoint.tenant, endpoint.id)
        await take_waiting(self._limiter, [key], 1, self._clock, most_s=1.0)
        event_id = f"evt_{event.id}"
        stamp_at = rfc3339(event.occurred_at, "milliseconds")
        body = event_body(event.type, stamp_at, event_data(event))
        headers = signed_headers(endpoint.secrets, event_id, int(self._clock.wall()), body)
        answer = await self._post(endpoint.url, body, headers, endpoint.allow_private)
        if answer.ok:
            return TryEnd(event, True, None, answer.status, "")
        self.failed += 1
        self.failures[_answer_name(answer)] += 1
        if self._telemetry is not None:
            self._telemetry.count("events_failed")
        now = self._clock.wall()
        if answer.status == 410:
            return TryEnd(event, False, now, 410, answer.error, "it answered 410 Gone")
        retry_s = self.settings.retry_s
        if event.tries > len(retry_s):
            return TryEnd(event, False, None, answer.status, answer.error)
        wait = retry_s[event.tries - 1]
        if answer.retry_after is not None:
            wait = _retry_after_s(answer.retry_after, now)
        return TryEnd(event, False, now + wait, answer.status, answer.error)

    def _ended(self, end: TryEnd) -> None:
        """Keep ``end`` for the next write of ends: one transaction for all those that ended
        meanwhile (the store's writer is shared with the dispatcher's)."""
        self._ends.append(end)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_ends())

    async def _write_ends(self) -> None:
        await self._clock.sleep(_GATHER_ENDS_S)  # those ending meanwhile go in the same write
        while self._ends:
            ends, self._ends = self._ends[:_ENDS_AT_ONCE], self._ends[_ENDS_AT_ONCE:]
            try:
                disabled = await self._store.status_events.finish(
                    self.owner,
                    ends,
                    now=self._clock.wall(),
                    disable_after_s=self.settings.disable_after_s,
                )
            except OmniPostError as exc:  # not written: their leases expire, they go again
                log.warning("status events: %s", exc.message)
                continue
            if any(end.retry_at is not None for end in ends):
                self._wake.set()  # its sleep was set before these were due again
            delivered = sum(1 for end in ends if end.delivered)
            self.delivered += delivered  # counted once written
            if self._telemetry is not None and delivered:
                self._telemetry.count("events_delivered", delivered)
            for endpoint_id, reason in disabled:
                log.warning("status events: endpoint %d disabled: %s", endpoint_id, reason)
                self.disabled.append((endpoint_id, reason))
                self._read_at = -1e18  # read its state again before the next post


def _answer_name(answer: PostAnswer) -> str:
    if answer.status is not None:
        return str(answer.status)
    return "refused" if answer.refused else "no answer"


def _retry_after_s(value: str, now: float) -> float:
    """An endpoint's ``Retry-After`` (seconds, or an HTTP date), at most 10 hours."""
    from engine.providers.webhook import parse_retry_after

    text = value.strip()
    if text.isdigit():
        return min(float(text), _MOST_RETRY_AFTER_S)
    return parse_retry_after(text, now)


def event_data(event: DueEvent) -> dict[str, object]:
    """The body's ``data``: the notification and what became of it, never a secret (the
    recipient masked)."""
    if event.notification_id is None:
        return {"tenant": event.tenant, "endpoint": event.endpoint_id, "sequence": event.sequence}
    data: dict[str, object] = {
        "id": event.notification_id,
        "tenant": event.tenant,
        "provider": event.provider,
        "state": event.state,
        "attempt": event.attempt,
        "max_attempts": event.max_attempts,
        "sequence": event.sequence,
        "idempotency_key": event.idempotency_key,
    }
    if event.recipient is not None:
        data["recipient"] = event.recipient
    if event.outcome is not None:
        data["outcome"] = event.outcome
        data["retrying"] = bool(event.retrying)
    if event.error:
        data["error"] = event.error
    return data
