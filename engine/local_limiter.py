"""The in-process ``Limiter``: one ``TokenBucket`` per configured key.

Each async method is a thin wrapper over a ``*_at(now, ...)`` method that takes time as an
argument, so tests step time by hand; the async methods read ``clock.monotonic()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.clock import Clock
from engine.domain import BucketKey, BucketLevel, Limit
from engine.limiter import Reservation
from engine.ratelimit import TokenBucket, whole

__all__ = ["LocalLimiter"]


class LocalLimiter:
    """A ``Limiter`` for one process and one event loop (not thread-safe).

    Keys with no configured limit are unlimited unless blocked. A blocked key grants nothing
    until its block ends; a blocked bucket is held empty until then and refills from there.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._buckets: dict[BucketKey, TokenBucket] = {}
        self._blocked_until: dict[BucketKey, float] = {}

    def configure_at(self, now: float, key: BucketKey, limit: Limit | None) -> None:
        """Remove (None), change live (level kept, clamped to the new burst) or add (full)."""
        bucket = self._buckets.get(key)
        if limit is None:
            self._buckets.pop(key, None)
        elif bucket is None:
            self._buckets[key] = TokenBucket(limit.rate_per_s, limit.burst, now)
        else:
            bucket.reconfigure(now, limit.rate_per_s, limit.burst)

    def reserve_at(self, now: float, keys: Sequence[BucketKey], n: int) -> Reservation:
        """Grant ``min(n, whole tokens in every configured bucket)``, 0 if any key is blocked,
        and debit that from each configured bucket. See ``Reservation`` for ``wait_s``."""
        unique = tuple(dict.fromkeys(keys))  # a key named twice is still one bucket
        if n <= 0:
            return Reservation(unique, 0)
        blocked: tuple[BucketKey, ...] = ()
        blocked_s = 0.0
        if self._blocked_until:
            holds = [(key, self._blocked_for(now, key)) for key in unique]
            blocked = tuple(key for key, hold_s in holds if hold_s > 0)
            blocked_s = max(hold_s for _, hold_s in holds)
        granted = 0 if blocked else n
        configured = []  # (key, bucket, whole tokens there now)
        for key in unique:
            bucket = self._buckets.get(key)
            if bucket is not None:
                tokens = whole(bucket.tokens_at(now))
                configured.append((key, bucket, tokens))
                granted = min(granted, tokens)
        if granted > 0:
            for _, bucket, _ in configured:
                bucket.try_take(now, granted)
        if granted == n:
            return Reservation(unique, granted)
        refills = {key: bucket.wait_s(now, 1.0) for key, bucket, _ in configured}
        wait_s = max([blocked_s, *refills.values()])
        if blocked:
            held_by = blocked
            held_for_s = tuple(self._blocked_for(now, key) for key in blocked)
        else:
            held_by = tuple(key for key, _, tokens in configured if tokens == granted)
            held_for_s = tuple(refills[key] for key in held_by)
        return Reservation(unique, granted, wait_s, held_by, held_for_s)

    def refund_at(self, now: float, reservation: Reservation, n: int) -> None:
        """Give back up to ``reservation.granted`` tokens to each of its configured buckets,
        except to buckets that are blocked now: those stay empty until the block ends."""
        n = min(n, reservation.granted)
        if n <= 0:
            return
        for key in reservation.keys:
            bucket = self._buckets.get(key)
            if bucket is not None and self._blocked_for(now, key) == 0:
                bucket.give(now, n)

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
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.drain(until)  # stamps the bucket at the block's end: no refill before it

    def levels_at(self, now: float) -> list[BucketLevel]:
        """Every configured bucket's level at ``now``, sorted by key."""
        levels = []
        for key in sorted(self._buckets):
            bucket = self._buckets[key]
            tokens = bucket.tokens_at(now)
            blocked_s = self._blocked_for(now, key)
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

    async def reserve(self, keys: Sequence[BucketKey], n: int) -> Reservation:
        return self.reserve_at(self._clock.monotonic(), keys, n)

    async def refund(self, reservation: Reservation, n: int) -> None:
        self.refund_at(self._clock.monotonic(), reservation, n)

    async def block(self, key: BucketKey, for_s: float) -> None:
        self.block_at(self._clock.monotonic(), key, for_s)

    async def levels(self) -> list[BucketLevel]:
        return self.levels_at(self._clock.monotonic())

    async def aclose(self) -> None:
        """Nothing to release; here for the ``Limiter`` protocol."""

    def __repr__(self) -> str:
        now = self._clock.monotonic()
        levels = ", ".join(
            f"{key} {bucket.tokens_at(now):.2f}/{bucket.burst:g}"
            for key, bucket in sorted(self._buckets.items(), key=lambda item: item[0])
        )
        blocked = ", ".join(
            f"{key} {until - now:.1f}s" for key, until in self._blocked_until.items() if until > now
        )
        return f"<LocalLimiter buckets [{levels}] blocked [{blocked}]>"
