"""The in-process ``Limiter``: one ``TokenBucket`` per configured key.

Each async method is a thin wrapper over a ``*_at(now, ...)`` method that takes time as an
argument, so tests step time by hand; the async methods read ``clock.monotonic()``, once per
call (a batch, ``reserve_many`` and the like, is one call: all of it at one instant).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, cast

from engine.core.clock import Clock
from engine.core.domain import BucketKey, BucketLevel, Limit
from engine.limits.bucket import TokenBucket
from engine.limits.limiter import Reservation

_PART = 5_000  # limits configured between two turns of the event loop

__all__ = ["LocalLimiter"]


def _put(
    limits: dict[BucketKey, Limit],
    buckets: dict[BucketKey, TokenBucket],
    now: float,
    key: BucketKey,
    limit: Limit | None,
) -> None:
    """Remove (None), change live (level kept, clamped to the new burst) or add (full: its
    bucket is made when first used)."""
    if limit is None:
        limits.pop(key, None)
        buckets.pop(key, None)
        return
    limits[key] = limit
    bucket = buckets.get(key)
    if bucket is not None:
        bucket.reconfigure(now, limit.rate_per_s, limit.burst)


# Per tuple of keys: the keys without repeats, their configured buckets, each key's bucket or
# None (in the keys' order: a reservation's ``rooms``), and the tuples of buckets that held a
# grant short, by which of them (a bit per bucket; negative for blocked ones): the same tuple
# each time, so that ``count_short`` counts by identity.
_Plan = tuple[
    tuple[BucketKey, ...],
    list[tuple[BucketKey, TokenBucket]],
    tuple[TokenBucket | None, ...],
    dict[int, tuple[BucketKey, ...]],
]
# Per tuple of buckets that held grants short (by identity): the first key asked, the tuple
# (kept: its id is not reused) and how often.
ShortCount = list[Any]
# Tuples of keys remembered (one per key with work: a dispatcher asks with its routes' own
# tuples); more are forgotten all at once. Above the keys a worker serves at once: at 10,000
# tenants on three providers 4,096 were forgotten and worked out again on every visit of a
# line of 10,000 keys (bench/plan.py --tenants 10000: 85.6 us a send, most of the gap to
# 48.9 us at 19 tenants). About 0.5 KB each.
_MAX_PLANS = 65_536


class LocalLimiter:
    """A ``Limiter`` for one process and one event loop (not thread-safe).

    Keys with no configured limit are unlimited unless blocked. A blocked key grants nothing
    until its block ends; a blocked bucket is held empty until then and refills from there.
    A configured key's bucket is made when it is first used (reserved from, blocked): until
    then it is full, as a bucket nobody took from is, and costs its limit's entry only
    (400,000 limits at 100,000 tenants, most of them never used by one process).
    """

    counts_lent = False  # one process's lent reservations follow one another: ``reserve_many``

    def __init__(self, clock: Clock, *, count_short: bool = False) -> None:
        self._clock = clock
        self._limits: dict[BucketKey, Limit] = {}  # every configured limit
        self._buckets: dict[BucketKey, TokenBucket] = {}  # those used so far
        self._blocked_until: dict[BucketKey, float] = {}
        self._plans: dict[int, tuple[tuple[BucketKey, ...], _Plan]] = {}  # see ``_plan``
        # With ``count_short``: how often each set of buckets held a grant short (``shorts``).
        self._short: dict[int, ShortCount] | None = {} if count_short else None

    def configure_at(self, now: float, key: BucketKey, limit: Limit | None) -> None:
        """Remove (None), change live (level kept, clamped to the new burst) or add (full)."""
        self._plans.clear()  # they name the configured buckets
        _put(self._limits, self._buckets, now, key, limit)

    def _bucket(self, now: float, key: BucketKey) -> TokenBucket | None:
        """``key``'s bucket, made full at ``now`` if it is configured and not used yet."""
        bucket = self._buckets.get(key)
        if bucket is None:
            limit = self._limits.get(key)
            if limit is not None:
                bucket = self._buckets[key] = TokenBucket.full(limit, now)
        return bucket

    def reserve_at(self, now: float, keys: Sequence[BucketKey], n: int) -> Reservation:
        """Grant ``min(n, whole tokens in every configured bucket)``, 0 if any key is blocked,
        and debit that from each configured bucket. See ``Reservation`` for ``wait_s`` and
        ``rooms``."""
        unique, configured, slots, held_sets = self._plan(now, keys)
        if n <= 0:
            return Reservation(unique, 0)
        blocked: tuple[BucketKey, ...] = ()
        blocked_s = 0.0
        if self._blocked_until:
            holds = [(key, self._blocked_for(now, key)) for key in unique]
            blocked = tuple(key for key, hold_s in holds if hold_s > 0)
            blocked_s = max(hold_s for _, hold_s in holds)
        granted = 0 if blocked else n
        levels = []  # whole tokens in each configured bucket now
        for _, bucket in configured:
            tokens = bucket.whole_at(now)
            levels.append(tokens)
            granted = tokens if tokens < granted else granted  # min(), without the call
        rooms: tuple[float, ...] = ()
        if granted > 0:
            left = [bucket.take_whole(now, granted) for _, bucket in configured]
            if len(left) == len(slots):  # every key configured: the rooms in the keys' order
                rooms = tuple(left)
            else:  # a key without a limit was debited nothing: nothing to give back to it
                taken = iter(left)
                rooms = tuple([0.0 if b is None else next(taken) for b in slots])
        if granted == n:  # the common case: once per send
            return Reservation(unique, n, 0.0, (), (), now, rooms)
        # Short: until every bucket has a token again, and which held it (the blocked ones,
        # else the emptiest: no more whole tokens than were granted).
        wait_s = blocked_s
        which = 0  # a bit per configured bucket that held it
        held_for_s: list[float] = []
        for i, (_, bucket) in enumerate(configured):  # by index: zip's strict= costs a parse
            tokens = levels[i]
            refill_s = bucket.wait_s(now, 1.0)
            wait_s = refill_s if refill_s > wait_s else wait_s  # max(), without the call
            if tokens == granted and not blocked:
                which |= 1 << i
                held_for_s.append(refill_s)
        if blocked:
            which = ~sum(1 << i for i, key in enumerate(unique) if key in blocked)
            held_for_s = [self._blocked_for(now, key) for key in blocked]
        held_by = held_sets.get(which) or _held_set(held_sets, which, configured, blocked)
        if self._short is not None:
            _count_short(self._short, unique, held_by)
        return Reservation(unique, granted, wait_s, held_by, tuple(held_for_s), now, rooms)

    def shorts(self) -> dict[tuple[BucketKey, tuple[BucketKey, ...]], int]:
        """With ``count_short``: how many grants each set of buckets held short, by the first
        key asked (for a send, its tenant's: ``BucketKey.for_send``) and that set."""
        counts: dict[tuple[BucketKey, tuple[BucketKey, ...]], int] = {}
        for first, held_by, n in (self._short or {}).values():
            counts[first, held_by] = counts.get((first, held_by), 0) + n
        return counts

    def _plan(self, now: float, keys: Sequence[BucketKey]) -> _Plan:
        """``keys`` without repeats, their configured buckets (in that order), each key's
        bucket or None, and the sets of buckets that held grants short. Kept per tuple of keys
        until a limit is configured,
        found by the tuple's identity (a dispatcher asks with the same few tuples again and
        again; hashing one would hash each key); worked out afresh for anything else."""
        if not isinstance(keys, tuple):
            return self._work_out(now, keys)
        kept = self._plans.get(id(keys))
        if kept is not None and kept[0] is keys:  # kept holds it: its id is not reused
            return kept[1]
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        plan = self._work_out(now, keys)
        self._plans[id(keys)] = (keys, plan)
        return plan

    def _work_out(self, now: float, keys: Sequence[BucketKey]) -> _Plan:
        unique = tuple(dict.fromkeys(keys))  # a key named twice is still one bucket
        if len(unique) == len(keys) and isinstance(keys, tuple):
            unique = keys  # the caller's own tuple: one fewer kept per key
        slots = tuple(self._bucket(now, key) for key in unique)
        configured = [(key, b) for key, b in zip(unique, slots, strict=True) if b is not None]
        return unique, configured, slots, {}

    def reserve_many_at(
        self, now: float, asks: Sequence[tuple[Sequence[BucketKey], int]]
    ) -> list[Reservation]:
        """``reserve_at(now, keys, n)`` for each ask in turn: each sees the takes of those
        before it (``Limiter.reserve_many``)."""
        return [self.reserve_at(now, keys, n) for keys, n in asks]

    def retake_at(self, now: float, reservation: Reservation, n: int) -> Reservation:
        """``refund_at`` every token of ``reservation``, then ``reserve_at`` up to ``n`` from
        its keys again (``Limiter.retake``)."""
        self.refund_at(now, reservation, reservation.granted)
        return self.reserve_at(now, reservation.keys, n)

    def retake_many_at(
        self, now: float, asks: Sequence[tuple[Reservation, int]]
    ) -> list[Reservation]:
        """``retake_at(now, reservation, n)`` for each ask in turn."""
        return [self.retake_at(now, reservation, n) for reservation, n in asks]

    def refund_many_at(self, now: float, refunds: Sequence[tuple[Reservation, int]]) -> None:
        """``refund_at(now, reservation, n)`` for each refund in turn."""
        for reservation, n in refunds:
            self.refund_at(now, reservation, n)

    def refund_at(self, now: float, reservation: Reservation, n: int) -> None:
        """Give back up to ``reservation.granted`` tokens to each of its configured buckets,
        each at most what it would hold had they never been taken (``Reservation.rooms``),
        except to buckets that are blocked now: those stay empty until the block ends."""
        n = min(n, reservation.granted)
        if n <= 0:
            return
        rooms = reservation.rooms
        elapsed = now - reservation.at if now > reservation.at else 0.0
        for i, key in enumerate(reservation.keys):
            bucket = self._buckets.get(key)
            if bucket is None or self._blocked_for(now, key) != 0:
                continue
            give: float = n
            if rooms:  # the room its take left, less what the bucket refilled since
                room = rooms[i] - bucket.rate_per_s * elapsed
                give = room if room < give else give
            if give > 0:
                bucket.give(now, give)

    def block_at(self, now: float, key: BucketKey, for_s: float) -> None:
        """Drain ``key``'s bucket (if configured) and grant nothing for it for ``for_s`` seconds.

        A shorter block never cuts a longer one short; ``for_s <= 0`` only drains. Raises
        ``ValueError`` when ``for_s`` is not finite.
        """
        if not math.isfinite(for_s):
            raise ValueError(f"a block must last a finite number of seconds, not {for_s!r}.")
        until = max(now + for_s, self._blocked_until.get(key, now))
        if until > now:
            self._blocked_until[key] = until
        bucket = self._bucket(now, key)
        if bucket is not None:
            bucket.drain(until)  # stamps the bucket at the block's end: no refill before it

    def levels_at(self, now: float, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        """Every configured bucket's level at ``now``, sorted by key; with ``keys``, only the
        configured ones among them (each once), looked up one by one."""
        limits, buckets = self._limits, self._buckets
        wanted = sorted(limits if keys is None else {key for key in keys if key in limits})
        levels = []
        for key in wanted:
            blocked_s = self._blocked_for(now, key)
            bucket = buckets.get(key)
            if bucket is None:  # not used yet: full
                limit = limits[key]
                burst = limit.burst
                levels.append(BucketLevel(key, burst, burst, limit.rate_per_s, blocked_s))
                continue
            tokens = bucket.tokens_at(now)
            levels.append(BucketLevel(key, tokens, bucket.burst, bucket.rate_per_s, blocked_s))
        return levels

    def _blocked_for(self, now: float, key: BucketKey) -> float:
        until = self._blocked_until.get(key)
        if until is None:
            return 0.0
        if until <= now:
            del self._blocked_until[key]
            return 0.0
        return until - now

    async def configure(self, key: BucketKey, limit: Limit | None) -> None:
        self.configure_at(self._clock.monotonic(), key, limit)

    async def configure_many(self, limits: Sequence[tuple[BucketKey, Limit | None]]) -> None:
        """Each at the clock's time when its part began: ``_PART`` at a time, with a turn of
        the event loop between parts (400,000 limits at an engine's start)."""
        kept, buckets = self._limits, self._buckets
        for start in range(0, len(limits), _PART):
            if start:
                await asyncio.sleep(0)
            now = self._clock.monotonic()
            self._plans.clear()  # as ``configure_at`` does, once a part
            part = limits[start : start + _PART]
            if not buckets and all(limit is not None for _key, limit in part):
                kept.update(cast(Sequence[tuple[BucketKey, Limit]], part))  # an engine's start
                continue
            for key, limit in part:
                _put(kept, buckets, now, key, limit)

    async def reserve(self, keys: Sequence[BucketKey], n: int) -> Reservation:
        return self.reserve_at(self._clock.monotonic(), keys, n)

    async def refund(self, reservation: Reservation, n: int) -> None:
        self.refund_at(self._clock.monotonic(), reservation, n)

    async def retake(self, reservation: Reservation, n: int) -> Reservation:
        return self.retake_at(self._clock.monotonic(), reservation, n)

    async def reserve_many(
        self, asks: Sequence[tuple[Sequence[BucketKey], int]], *, lent: bool = False
    ) -> list[Reservation]:
        """See ``Limiter.reserve_many``. ``lent`` changes nothing here: one process's lent
        reservations (the dispatcher's claims) follow one another, each settled before the
        next is made, so each refund's own bound (``Reservation.rooms``) is the whole one."""
        if not asks:
            return []
        return self.reserve_many_at(self._clock.monotonic(), asks)

    async def retake_many(self, asks: Sequence[tuple[Reservation, int]]) -> list[Reservation]:
        if not asks:
            return []
        return self.retake_many_at(self._clock.monotonic(), asks)

    async def refund_many(self, refunds: Sequence[tuple[Reservation, int]]) -> None:
        if refunds:
            self.refund_many_at(self._clock.monotonic(), refunds)

    async def block(self, key: BucketKey, for_s: float) -> None:
        self.block_at(self._clock.monotonic(), key, for_s)

    async def levels(self, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        return self.levels_at(self._clock.monotonic(), keys)

    async def aclose(self) -> None:
        """Nothing to release; here for the ``Limiter`` protocol."""

    def __repr__(self) -> str:
        now = self._clock.monotonic()
        levels = ", ".join(
            f"{level.key} {level.tokens:.2f}/{level.burst:g}" for level in self.levels_at(now)
        )
        blocked = ", ".join(
            f"{key} {until - now:.1f}s" for key, until in self._blocked_until.items() if until > now
        )
        return f"<LocalLimiter buckets [{levels}] blocked [{blocked}]>"


def _count_short(
    short: dict[int, ShortCount], keys: tuple[BucketKey, ...], held_by: tuple[BucketKey, ...]
) -> None:
    seen = short.get(id(held_by))  # the plan's own tuple: see ``_Plan``
    if seen is None:
        short[id(held_by)] = [keys[0], held_by, 1]
    else:
        seen[2] += 1


def _held_set(
    held_sets: dict[int, tuple[BucketKey, ...]],
    which: int,
    configured: list[tuple[BucketKey, TokenBucket]],
    blocked: tuple[BucketKey, ...],
) -> tuple[BucketKey, ...]:
    """The tuple of buckets that ``which`` names (see ``_Plan``), made once and kept."""
    held = blocked or tuple(key for i, (key, _) in enumerate(configured) if which >> i & 1)
    held_sets[which] = held
    return held
