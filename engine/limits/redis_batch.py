"""The Redis limiter's batches: ``reserve_many``, ``retake_many`` and ``refund_many`` (the
``RedisBatches`` mixin of ``engine.limits.redis_limiter.RedisLimiter``).

A batch is its single calls (``reserve``, ``retake``, ``refund``) made one after another, in
order, with nothing of this process's in between, and each answer is the one that call would
give, Redis's era and all. While Redis is in use, the whole batch is one round trip: a pipeline
of ``FCALL``s of ``redis_lua/batch.lua``, each over at most ``CHUNK`` calls. Each script is
atomic and reads Redis's ``TIME`` once; between two of them Redis serves other clients (a long
batch never holds it for long), so other processes may take tokens there, as they may between
single calls. Each script has ``call_timeout_s`` to answer, counted from the answer before it:
a long batch takes as long as its scripts do, and a hung Redis is left ``call_timeout_s`` after
its last answer. Calls that need no I/O (asking for nothing, refunding nothing or tokens of
another backend's) are answered without it, so an empty batch does none.

Redis Cluster is not supported (a send's script already spans a tenant's hash tag and a
provider's: CROSSSLOT), so one script spans any tenants; supporting it would mean grouping
each chunk by slot, a provider's buckets apart from the tenants'.

Falling back is the single calls', call by call. While a fallback runs, each call is served by
it as its single call would be, and a reservation or retake probes Redis when a probe is due
(a probe that finds it back sends the rest of the batch to Redis again). A chunk that fails
(unreachable, timed out, an error reply) fails as the single call at its start would have:
the limiter falls back, that call is answered as after such a failure (a reserve or retake by
the fallback, a refund's tokens left out), and the calls after it go on as above. The chunks
answered before it stand. A chunk's buckets are written at its end only, so one whose read
failed (WRONGTYPE) took nothing; one that timed out, and the chunks after a failed one in the
same round trip, may still have taken their tokens in Redis, unused, as a timed-out single call
may: never more granted than the limits allow. A chunk that finds Redis's data lost (nothing
done) seeds it, as ``reserve`` does, and is sent again from its first reservation; a retake
sent again gives nothing back, as a single one then does.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis

from engine.core.clock import Clock
from engine.core.domain import BucketKey, Limit
from engine.limits.limiter import Reservation
from engine.limits.redis_calls import UNAVAILABLE, Arg, LuaCalls
from engine.limits.redis_fallback import PEERS_EVERY_S, PEERS_S, Granted, LocalFallback

__all__ = ["CHUNK", "WHOLE_SET", "RedisBatches"]

CHUNK = 500  # calls per script: some milliseconds of Redis's time (about 12 ms here)
WHOLE_SET = 1000  # a configure_many this large is skipped when Redis holds exactly its set
_T = TypeVar("_T")
_PEERS_ARG = repr(PEERS_S)
log = logging.getLogger(__name__)


class _Host(Protocol):
    """What a batch uses of its ``RedisLimiter``."""

    _fallback: LocalFallback
    _calls: LuaCalls
    _clock: Clock
    _marker_key: str
    _limits_key: str
    _peers_key: str
    _client: Redis
    _name: str
    _count_peers_at: float
    _seen_marker: bool
    _pending: dict[BucketKey, Limit | None]

    def _hashes(self, keys: Sequence[BucketKey]) -> list[str]: ...

    async def _bounded(self, command: Awaitable[_T]) -> _T: ...

    async def _use_redis(self) -> bool: ...

    def _degrade(self, exc: BaseException) -> None: ...

    async def _seed(self) -> None: ...

    def _configure_call(
        self, key: BucketKey, limit: Limit | None, fill: str
    ) -> tuple[list[str], list[str]]: ...

    async def _mark_seeded(self, limits: Sequence[tuple[BucketKey, Limit | None]]) -> None: ...

    async def _configure_all(
        self, limits: Sequence[tuple[BucketKey, Limit | None]], *, fill: str
    ) -> None: ...


class _Kind(Enum):
    NOTHING = "nothing"  # answered already, without I/O
    RESERVE = "reserve"
    RETAKE = "retake"
    REFUND = "refund"


@dataclass(slots=True)
class _Call:
    """One call of a batch. A refund gives back ``give`` tokens of ``of``; a retake gives back
    ``of`` and takes ``n`` again; ``back`` is what it gives back in Redis, once decided."""

    kind: _Kind
    keys: tuple[BucketKey, ...]
    n: int = 0
    give: int = 0
    of: Reservation | None = None
    answer: Reservation | None = None
    back: int = 0
    lost: bool = False  # Redis lost its data under this retake: it gives nothing back
    lent: bool = False  # a reservation whose tokens a retake or refund will settle


def _reserve_call(keys: Sequence[BucketKey], n: int, lent: bool) -> _Call:
    unique = tuple(dict.fromkeys(keys))
    if n <= 0:
        return _Call(_Kind.NOTHING, unique, answer=Reservation(unique, 0))
    return _Call(_Kind.RESERVE, unique, n, lent=lent)


def _retake_call(reservation: Reservation, n: int) -> _Call:
    keys = reservation.keys
    if n > 0:
        return _Call(_Kind.RETAKE, keys, n, of=reservation)
    nothing = Reservation(keys, 0)  # after a refund of every token it holds, if any
    if reservation.granted <= 0:
        return _Call(_Kind.NOTHING, keys, answer=nothing)
    return _Call(_Kind.REFUND, keys, give=reservation.granted, of=reservation, answer=nothing)


def _refund_call(reservation: Reservation, n: int) -> _Call:
    give = min(n, reservation.granted)
    if give <= 0:
        return _Call(_Kind.NOTHING, reservation.keys)
    return _Call(_Kind.REFUND, reservation.keys, give=give, of=reservation)


def _answers(calls: list[_Call]) -> list[Reservation]:
    answers = []
    for call in calls:
        assert call.answer is not None  # every reservation and retake is answered
        answers.append(call.answer)
    return answers


def _digest(limits: Sequence[tuple[BucketKey, Limit | None]]) -> str:
    """What identifies a set of limits whatever its order: the count and the sum of a 64-bit
    hash of each (key, rate, burst)."""
    total = 0
    for key, limit in limits:
        spec = "-" if limit is None else f"{limit.rate_per_s!r}/{limit.burst!r}"
        item = hashlib.blake2b(f"{key}={spec}".encode(), digest_size=8).digest()
        total += int.from_bytes(item)
    return f"{len(limits)}:{total % (1 << 64):016x}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisBatches:
    """The batch calls of the ``Limiter`` protocol for ``RedisLimiter``: see the module."""

    async def configure_many(self: _Host, limits: Sequence[tuple[BucketKey, Limit | None]]) -> None:
        """See ``Limiter.configure_many``: ``CHUNK`` configurations a round trip; while Redis
        is away, kept for when it answers again, as ``configure`` keeps one. A set of at least
        ``WHOLE_SET`` (a worker's first load of the configuration) is not written again when
        Redis says it holds exactly that set, as the last one written whole: at 100,000
        tenants, every worker's start wrote 100,000 limits that were there already (about
        3 s of its CPU)."""
        for key, limit in limits:
            self._fallback.remember(key, limit)
        if await self._use_redis():
            try:
                if len(limits) < WHOLE_SET:
                    await self._configure_all(limits, fill="full")
                    return
                held = await self._bounded(self._client.get(self._limits_key))
                if held is None or _text(held) != _digest(limits):
                    await self._configure_all(limits, fill="full")
                    await self._mark_seeded(limits)
                return
            except UNAVAILABLE as exc:
                self._degrade(exc)
        for key, limit in limits:
            self._pending[key] = limit
            self._fallback.apply(key)

    async def _mark_seeded(self: _Host, limits: Sequence[tuple[BucketKey, Limit | None]]) -> None:
        """After a whole set was written: on a Redis without the seed marker that this process
        never saw (a first start on a fresh Redis, or one that lost its data before this
        process came), set it when the set held every limit this process knows. The first
        reservation would otherwise find it missing and seed Redis, writing every limit once
        more to the same end (those just written keep their levels): at 100,000 tenants about
        a second and a half of a starting worker's CPU."""
        if self._seen_marker:
            return  # a marker missing now is a loss: the reservation that finds it seeds
        written = {key for key, limit in limits if limit is not None}
        if any(key not in written for key in self._fallback.limits):
            return
        if await self._bounded(self._client.set(self._marker_key, "1", nx=True)):
            log.debug("Redis had no seed marker: set after writing the %d limits", len(written))

    async def _configure_all(
        self: _Host, limits: Sequence[tuple[BucketKey, Limit | None]], *, fill: str
    ) -> None:
        """The configure script for each of ``limits``, ``CHUNK`` of them a round trip, in
        order; the first failure is raised once its chunk's replies are in. The digest of the
        last set written whole goes first (Redis no longer holds exactly that set), and a set
        of ``WHOLE_SET`` or more, once written, leaves its own."""
        await self._bounded(self._client.delete(self._limits_key))
        for start in range(0, len(limits), CHUNK):
            chunk = limits[start : start + CHUNK]
            calls = [self._configure_call(key, limit, fill) for key, limit in chunk]
            for reply in await self._calls.many("configure", calls):
                if isinstance(reply, BaseException):
                    raise reply
        if len(limits) >= WHOLE_SET:
            await self._bounded(self._client.set(self._limits_key, _digest(limits)))

    async def reserve_many(
        self: _Host, asks: Sequence[tuple[Sequence[BucketKey], int]], *, lent: bool = False
    ) -> list[Reservation]:
        """See ``Limiter.reserve_many`` and this module: one round trip while Redis is in use.
        Lent tokens are counted in each bucket's ``lent`` (``redis_lua/common.lua``), which
        bounds every refund."""
        calls = [_reserve_call(keys, n, lent) for keys, n in asks]
        await _Batch(self, calls).run()
        return _answers(calls)

    async def retake_many(
        self: _Host, asks: Sequence[tuple[Reservation, int]]
    ) -> list[Reservation]:
        """See ``Limiter.retake_many`` and ``RedisLimiter.retake``: tokens another backend
        granted are not given back. One round trip while Redis is in use."""
        calls = [_retake_call(reservation, n) for reservation, n in asks]
        await _Batch(self, calls).run()
        return _answers(calls)

    async def refund_many(self: _Host, refunds: Sequence[tuple[Reservation, int]]) -> None:
        """See ``Limiter.refund_many`` and ``RedisLimiter.refund``: only to the backend that
        granted each reservation, while it is in use. One round trip while Redis is in use."""
        await _Batch(self, [_refund_call(reservation, n) for reservation, n in refunds]).run()


class _Batch:
    """One batch call's run: its calls answered in order (see the module docstring)."""

    def __init__(self, host: _Host, calls: list[_Call]) -> None:
        self._host = host
        self._fallback = host._fallback
        self._calls = calls
        self._retried = -1  # the call sent again after seeding Redis
        self._counting = False  # whether the next chunk that reserves counts the peers
        self._counted_at = -math.inf  # when the chunks now sent were made

    async def run(self) -> None:
        at = 0
        while at < len(self._calls):
            call = self._calls[at]
            if call.kind is _Kind.NOTHING:
                at += 1
            elif self._fallback.active and (
                call.kind is _Kind.REFUND or not await self._host._use_redis()
            ):
                self._locally(call)
                at += 1
            else:
                at = await self._on_redis(at)

    def _locally(self, call: _Call) -> None:
        """Answer ``call`` from the running fallback, as its single call would."""
        if call.kind is _Kind.RESERVE:
            call.answer = self._fallback.reserve(call.keys, call.n)
        elif call.kind is _Kind.RETAKE:
            assert call.of is not None
            call.answer = self._fallback.retake(call.of, call.n)
        elif call.of is not None and self._fallback.current(call.of):
            self._fallback.refund(call.of, call.give)

    def _failed(self, at: int, exc: BaseException) -> int:
        """Redis failed the call at ``at``: fall back, answer it as its single call would after
        that failure (a refund's tokens stay out), and go on after it."""
        self._host._degrade(exc)
        call = self._calls[at]
        if call.kind is not _Kind.REFUND:
            call.answer = self._fallback.reserve(call.keys, call.n)
        return at + 1

    def _to_redis(self, call: _Call) -> bool:
        """Whether ``call`` goes to Redis (in use now), and what it gives back there: tokens
        another backend granted are not given back."""
        if call.kind is _Kind.NOTHING:
            return False
        current = call.of is not None and self._fallback.current(call.of)
        if call.kind is _Kind.RESERVE:
            call.back = 0
            return True
        if call.kind is _Kind.RETAKE:
            call.back = call.of.granted if call.of is not None and current and not call.lost else 0
            return True
        call.back = call.give
        return current

    async def _on_redis(self, start: int) -> int:
        """Send the calls from ``start`` on to Redis in one round trip; the next call to run."""
        era = self._fallback.era  # Redis's, even if an answer comes after a fallback took over
        sent = [at for at in range(start, len(self._calls)) if self._to_redis(self._calls[at])]
        chunks = [sent[i : i + CHUNK] for i in range(0, len(sent), CHUNK)]
        self._counted_at = self._host._clock.monotonic()
        self._counting = self._counted_at >= self._host._count_peers_at
        replies: list[Any]
        try:
            replies = await self._host._calls.many("batch", [self._args(c) for c in chunks])
        except UNAVAILABLE as exc:
            replies = [exc]  # the first chunk failed (and with it every other)
        for chunk, reply in zip(chunks, replies, strict=False):
            if isinstance(reply, BaseException):
                return self._failed(chunk[0], reply)
            if reply[0] == -1:
                return await self._lost(chunk, era)
            self._answer(chunk, reply, era)
        return len(self._calls)

    def _args(self, chunk: list[int]) -> tuple[list[str], list[Arg]]:
        """A chunk's keys and arguments for ``batch.lua``; the first that reserves carries this
        process into the set of peers when that is due, as a ``reserve`` would."""
        host = self._host
        keys = [host._marker_key, host._peers_key]
        args: list[Arg] = ["", _PEERS_ARG]
        for at in chunk:
            call = self._calls[at]
            names = host._hashes(call.keys)
            keys += names
            of = call.of
            gives_lent = call.back > 0 and isinstance(of, Granted) and of.lent
            args += (len(names), call.n, int(call.lent) + 2 * gives_lent, call.back)
            if call.back > 0:  # the take it gives back: when, and the room it left in each
                if of is not None and len(of.rooms) == len(names):
                    args += (repr(of.at), *map(repr, of.rooms))
                else:  # made without them: given back up to the burst
                    args += ("", *[""] * len(names))
            if self._counting and call.n:
                args[0], self._counting = host._name, False
        return keys, args

    def _answer(self, chunk: list[int], reply: list[Any], era: int) -> None:
        processes = int(reply[1])
        if processes >= 0:
            self._host._count_peers_at = self._counted_at + PEERS_EVERY_S
            self._fallback.saw_peers(processes)
        now = float(_text(reply[2]))  # Redis's time: what a refund of these is bounded from
        k = 3
        for at in chunk:
            call = self._calls[at]
            count = len(call.keys)
            if call.kind is _Kind.REFUND:
                k += 3 + count
                continue
            granted, wait_s = max(0, int(reply[k])), float(_text(reply[k + 1]))
            wait_s = math.inf if wait_s < 0 else wait_s
            held_at = int(reply[k + 2])  # the bucket that held it short: 1 for the first
            held = (call.keys[held_at - 1],) if 0 < held_at <= count else ()
            rooms = tuple(float(_text(room)) for room in reply[k + 3 : k + 3 + count])
            k += 3 + count
            call.answer = Granted(
                call.keys,
                granted,
                wait_s,
                held,
                (wait_s,) if held else (),
                now,
                rooms,
                era=era,
                lent=call.lent and granted > 0,
            )
            self._host._seen_marker = True

    async def _lost(self, chunk: list[int], era: int) -> int:
        """Redis lost its data (``chunk`` did nothing): seed it as ``reserve`` does, then send
        again from the chunk's first reservation (the refunds before it had nothing to give
        back to); the next call to run."""
        at = next(at for at in chunk if self._calls[at].kind is not _Kind.REFUND)
        call = self._calls[at]
        if self._retried == at:  # lost again right after seeding: as reserve, nothing granted
            call.answer = Granted(call.keys, 0, 0.0, era=era)
            return at + 1
        try:
            await self._host._seed()
        except UNAVAILABLE as exc:
            return self._failed(at, exc)
        self._retried, call.lost = at, True
        return at
