"""What a ``RedisLimiter`` enforces while Redis is unreachable: ``LocalFallback``.

It is an in-process ``LocalLimiter`` over the limits this process configured, each divided by
the processes that share it (so all of them together stay within the shared limit): the live
worker count, or more while Redis's own count is fresh. Redis counts the processes that
reserved in the last ``PEERS_S``, since a worker that has just started is missing from the
others' heartbeat counts for up to a heartbeat. Every bucket of a fallback starts empty, also
one configured while it runs: Redis (or another process, from it) may have just spent it.

A reservation remembers which backend granted it (Redis, or one fallback: each switch starts a
new era), and a refund goes back to that one only: tokens Redis granted just before it went
away must not fill the fallback, nor may the fallback's go to Redis once it is back.

Probing Redis and returning to it are the ``RedisLimiter``'s job
(``engine/limits/redis_limiter.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine.core.clock import Clock
from engine.core.domain import BucketKey, BucketLevel, Limit
from engine.limits.limiter import Reservation
from engine.limits.local_limiter import LocalLimiter

__all__ = ["PEERS_EVERY_S", "PEERS_S", "Granted", "LocalFallback"]

PEERS_S = 10.0  # a process counts as sharing the limits this long after its last reservation
# How often a process writes itself into Redis's set of processes that reserve: a few times a
# second keeps the count (kept for PEERS_S) fresh, without four more commands per reservation.
PEERS_EVERY_S = 0.25


def _share(limit: Limit, workers: int) -> Limit:
    """One worker's part of ``limit`` when ``workers`` enforce it apart from each other."""
    return Limit(limit.rate_per_s / workers, max(1.0, limit.burst / workers))


@dataclass(slots=True)  # a value, never changed; not frozen, as Reservation
class Granted(Reservation):
    """A ``Reservation``, the era of the backend that granted it (see ``LocalFallback``) and
    whether its tokens are lent (``Limiter.reserve_many``)."""

    era: int = 0
    lent: bool = False


class LocalFallback:
    """The limits one process configured, and their local shares while Redis is away.

    ``workers`` returns the live worker count. ``start`` begins a fallback (a new era, every
    bucket empty), ``stop`` ends it (Redis's era again); ``reserve``, ``refund``, ``block``,
    ``levels`` and ``apply`` are for while it runs, and first bring the shares up to date with
    the processes sharing them.
    """

    def __init__(self, clock: Clock, workers: Callable[[], int]) -> None:
        self._clock = clock
        self._workers = workers
        self._limits: dict[BucketKey, Limit] = {}
        self._peers = 1  # how many processes Redis saw reserving, as of _peers_at
        self._peers_at = -math.inf
        self._local: LocalLimiter | None = None
        self._in_local: set[BucketKey] = set()  # the keys the fallback has a bucket for
        self._divisor = 1
        self.era = 0  # one more at every switch between Redis and a fallback

    @property
    def active(self) -> bool:
        return self._local is not None

    @property
    def limits(self) -> Mapping[BucketKey, Limit]:
        """What this process configured: the fallback shares these, and Redis is reseeded
        with them."""
        return self._limits

    def remember(self, key: BucketKey, limit: Limit | None) -> None:
        """Note ``key``'s limit (None: unlimited); ``apply`` gives a running fallback it."""
        if limit is None:
            self._limits.pop(key, None)
        else:
            self._limits[key] = limit

    def saw_peers(self, peers: int) -> None:
        """Redis has just counted ``peers`` processes reserving in the last ``PEERS_S``."""
        self._peers, self._peers_at = peers, self._clock.monotonic()

    def sharing(self) -> int:
        """How many processes share each limit: the live worker count, or Redis's count of
        those that reserved lately while it is fresh, whichever is more."""
        workers = max(1, self._workers())
        if self._clock.monotonic() - self._peers_at < PEERS_S:
            return max(workers, self._peers)
        return workers

    def start(self) -> int:
        """Begin a fallback, every bucket empty; returns how many processes it shares by."""
        self._divisor = self.sharing()
        self._local = LocalLimiter(self._clock)
        self._in_local = set()
        self.era += 1
        now = self._clock.monotonic()
        for key in self._limits:
            self._set_share(now, key)
        return self._divisor

    def stop(self) -> None:
        """Redis is back: drop the fallback; what it granted is no longer refunded."""
        self._local = None
        self.era += 1

    def current(self, reservation: Reservation) -> bool:
        """Whether the backend in use now granted ``reservation`` (one made elsewhere counts
        as its)."""
        era = reservation.era if isinstance(reservation, Granted) else self.era
        return era == self.era

    def apply(self, key: BucketKey) -> None:
        """Give the running fallback ``key``'s share of its remembered limit, or remove it."""
        self._shares()
        self._set_share(self._clock.monotonic(), key)

    def reserve(self, keys: Sequence[BucketKey], n: int) -> Granted:
        local = self._shares().reserve_at(self._clock.monotonic(), keys, n)
        return Granted(
            local.keys,
            local.granted,
            local.wait_s,
            local.held_by,
            local.held_for_s,
            local.at,
            local.rooms,
            era=self.era,
        )

    def refund(self, reservation: Reservation, n: int) -> None:
        self._shares().refund_at(self._clock.monotonic(), reservation, n)

    def retake(self, reservation: Reservation, n: int) -> Granted:
        """``refund`` every token of ``reservation`` (if this fallback granted it), then
        ``reserve`` up to ``n`` again."""
        if self.current(reservation):
            self.refund(reservation, reservation.granted)
        return self.reserve(reservation.keys, n)

    def block(self, key: BucketKey, for_s: float) -> None:
        self._shares().block_at(self._clock.monotonic(), key, for_s)

    def levels(self, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        """This process's buckets (those among ``keys``, if given), with the shares it
        enforces."""
        return self._shares().levels_at(self._clock.monotonic(), keys)

    def _shares(self) -> LocalLimiter:
        """The fallback, its shares brought up to date with the processes sharing them."""
        assert self._local is not None
        sharing = self.sharing()
        if sharing != self._divisor:
            self._divisor = sharing
            now = self._clock.monotonic()
            for key in self._limits:
                self._set_share(now, key)
        return self._local

    def _set_share(self, now: float, key: BucketKey) -> None:
        """Give the fallback ``key``'s share of its limit, or remove it. A bucket it did not
        have starts empty: Redis (or another process, from it) may have just spent it."""
        assert self._local is not None
        limit = self._limits.get(key)
        if limit is None:
            self._local.configure_at(now, key, None)
            self._in_local.discard(key)
            return
        self._local.configure_at(now, key, _share(limit, self._divisor))
        if key not in self._in_local:
            self._in_local.add(key)
            self._local.block_at(now, key, 0.0)  # drains it, no more

    def __repr__(self) -> str:
        state = f"1/{self._divisor} era={self.era}" if self.active else f"off era={self.era}"
        return f"<LocalFallback {state} limits={len(self._limits)}>"
