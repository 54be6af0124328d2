"""The limiter seam: buckets per tenant, per provider and per (tenant, provider).

A send of tenant T through provider P is governed by every configured bucket among
``BucketKey.for_send(T, P)``; a key with no configured limit is unlimited.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.core.clock import Clock
from engine.core.domain import BucketKey, BucketLevel, Limit

__all__ = ["Limiter", "Reservation", "take_waiting"]


@dataclass(slots=True)  # a value, shared once made: never changed (not frozen: made per send)
class Reservation:
    """Tokens taken from every bucket of ``keys`` at once.

    ``granted`` is between 0 and the number asked for. When it is below what was asked,
    ``wait_s`` says how long until at least one more token is there in every bucket
    (``math.inf`` when it never will be); otherwise it is 0.0. ``held_by`` names the buckets
    that held it short (emptiest or blocked), when the limiter knows them, and ``held_for_s``
    how long each of them takes to have a token again; the dispatcher then skips other keys
    behind those buckets for the rest of its round, and looks again by then.

    ``at`` (the limiter's own time: Redis's, for the Redis limiter) and ``rooms`` (per key of
    ``keys``: its bucket's burst less its level just after this take, 0 for a key with no
    bucket) bound what a refund of these tokens gives back: at most what each bucket would
    hold had they never been taken, ``room - rate * (now - at)``, never a token the bucket
    would have lost to its burst meanwhile. A reservation made without them (``rooms``
    empty: by hand, or granting nothing) is given back up to the burst. Either way, the Redis
    limiter gives back no more than its lent reservations left room for (``reserve_many``).
    """

    keys: tuple[BucketKey, ...]
    granted: int
    wait_s: float = 0.0
    held_by: tuple[BucketKey, ...] = field(default=(), compare=False)
    held_for_s: tuple[float, ...] = field(default=(), compare=False)
    at: float = field(default=0.0, compare=False)
    rooms: tuple[float, ...] = field(default=(), compare=False)


class Limiter(Protocol):
    """Implemented in process (``engine.limits.local_limiter.LocalLimiter``) and over Redis.

    ``counts_lent``: whether the buckets count the tokens out on lent reservations
    (``reserve_many``); then every lent reservation must be settled by a ``retake`` or a
    ``refund`` of all its tokens, or they stay counted as lent until its bucket is full."""

    counts_lent: bool

    async def configure(self, key: BucketKey, limit: Limit | None) -> None:
        """Set, change (live: brought up to date at the old rate first) or remove a limit."""
        ...

    async def configure_many(self, limits: Sequence[tuple[BucketKey, Limit | None]]) -> None:
        """``configure(key, limit)`` for each of ``limits`` in turn: a directory of ten
        thousand tenants is configured at start-up in a few calls, not ten thousand (on Redis
        a round trip for many at once)."""
        ...

    async def reserve(self, keys: Sequence[BucketKey], n: int) -> Reservation:
        """Take up to ``n`` tokens from every configured bucket of ``keys``, all or nothing per
        token: the same number from each, and none from any unless all allow it."""
        ...

    async def refund(self, reservation: Reservation, n: int) -> None:
        """Give back ``n`` unused tokens of ``reservation`` to each of its buckets, each at
        most what the bucket would hold had they never been taken (see ``Reservation``)."""
        ...

    async def retake(self, reservation: Reservation, n: int) -> Reservation:
        """Give back every token of ``reservation`` and take up to ``n`` from its buckets again,
        in one step: as ``refund`` then ``reserve``, with nothing in between. The refund's
        bound is what keeps a retake after a slow claim inside the envelope: many keys share
        a provider's bucket, and a bucket that refilled to its burst during the claim cannot
        take their reservations back whole (each would then find it full again, and the
        sends after the claim would spend its burst twice)."""
        ...

    async def block(self, key: BucketKey, for_s: float) -> None:
        """Drain ``key``'s bucket and hold it empty for ``for_s`` seconds (a provider's 429).
        Works for unconfigured keys too: they are held closed for that time."""
        ...

    async def reserve_many(
        self, asks: Sequence[tuple[Sequence[BucketKey], int]], *, lent: bool = False
    ) -> list[Reservation]:
        """``reserve(keys, n)`` for each ``(keys, n)`` of ``asks``, one after another in order
        with nothing of this caller's in between, and their answers in that order: each ask
        sees what those before it took (asks sharing a bucket share its tokens), and each
        ``Reservation`` has the fields its ``reserve`` would give. An empty batch returns
        ``[]`` and does no I/O. Costs less than the calls one by one (over a network, one round
        trip per batch rather than per ask); where a limiter is atomic per call, it is per
        batch or per chunk of one, as its docstring says.

        ``lent``: the caller will settle every one of these reservations with a ``retake`` or
        a ``refund`` (the dispatcher's claim: reserve, lease, retake what it leased). Their
        tokens are then lent: a refund of them gives back no more than the bucket would hold
        had none of the lent reservations not yet settled been taken, so that the claims of
        several processes, overlapping in time, never give a bucket back a token that all of
        them together would have lost to its burst. A reservation not lent is given back as
        far as its own room allows (``Reservation``): exact for one caller's reservations
        settled one after another, not for refunds of several processes that overlap in
        time."""
        ...

    async def retake_many(self, asks: Sequence[tuple[Reservation, int]]) -> list[Reservation]:
        """``retake(reservation, n)`` for each ``(reservation, n)`` of ``asks`` in turn, as
        ``reserve_many`` does ``reserve``: the same answers, in order, ``[]`` for none."""
        ...

    async def refund_many(self, refunds: Sequence[tuple[Reservation, int]]) -> None:
        """``refund(reservation, n)`` for each ``(reservation, n)`` of ``refunds`` in turn, as
        ``reserve_many`` does ``reserve``; nothing (no I/O) for none."""
        ...

    async def levels(self, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        """Every configured bucket's level now, sorted by key; with ``keys``, only the
        configured ones among them, each once, also sorted (``levels()`` with the others left
        out), at a cost in proportion to ``len(keys)``, not to the buckets configured."""
        ...

    async def aclose(self) -> None: ...


async def take_waiting(
    limiter: Limiter, keys: Sequence[BucketKey], n: int, clock: Clock, most_s: float
) -> None:
    """Take ``n`` tokens from every bucket of ``keys``, waiting as long as they take to fall
    due (each wait at least 1 ms and at most ``most_s``, then asking again)."""
    while n:
        got = await limiter.reserve(keys, n)
        n -= got.granted
        if n:
            await clock.sleep(min(max(got.wait_s, 0.001), most_s))
