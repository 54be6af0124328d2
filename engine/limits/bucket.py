"""A token bucket that takes time as an argument, like Go's x/time/rate ``AllowN(t, n)``.

Nothing here reads a clock or sleeps: ``now`` is any monotonic reading in seconds, so callers
and tests decide what time it is. Time going backwards never mints tokens: the bucket keeps
the latest time it has seen, and an earlier ``now`` adds nothing and does not move it back.

Float rounding: a level computed as ``0.2 + 0.2 + ...`` or after a reconfigure can land a hair
below a whole token at the very instant that token falls due. The bucket counts a level within
``EPSILON`` (a billionth of a token) of ``n`` as ``n``, and keeps the hair it lent as a debt
(the level may read ``-1e-10``), so rounding never delays a token and never grants one more than
``burst + rate * t``.
"""

from __future__ import annotations

import math

from engine.core.domain import Limit, check_limit

__all__ = ["EPSILON", "TokenBucket", "whole"]

EPSILON = 1e-9  # tokens: how far below a whole token rounding may leave a level that is due


def whole(tokens: float) -> int:
    """The whole tokens in a level, counting one within ``EPSILON`` of the next as there."""
    return math.floor(tokens + EPSILON)


def _check_n(n: float) -> None:
    if not n >= 0:  # also rejects NaN
        raise ValueError(f"a number of tokens must be 0 or more, not {n!r}.")


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up; full at ``now``.

    ``tokens = min(burst, tokens + elapsed * rate_per_s)``, and a take of ``n`` succeeds when
    at least ``n`` tokens are there. Raises ``ConfigError`` (a ``ValueError``) unless the rate
    is a finite number above 0 and the burst a finite number of at least 1, and ``ValueError``
    when ``now`` is not finite. Methods taking ``n`` raise ``ValueError`` when it is below 0.
    """

    __slots__ = ("_burst", "_rate_per_s", "_stamp", "_tokens")

    def __init__(self, rate_per_s: float, burst: float, now: float) -> None:
        check_limit(rate_per_s, burst)
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite time in seconds, not {now!r}.")
        self._rate_per_s = float(rate_per_s)
        self._burst = float(burst)
        self._tokens = self._burst
        self._stamp = float(now)  # the latest time seen; tokens are as of then

    @classmethod
    def full(cls, limit: Limit, now: float) -> TokenBucket:
        """A full bucket of ``limit`` (checked when it was made) at ``now``: 400,000 made at
        an engine's start without checking each limit again."""
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite time in seconds, not {now!r}.")
        bucket = cls.__new__(cls)
        bucket._rate_per_s = float(limit.rate_per_s)
        bucket._burst = bucket._tokens = float(limit.burst)
        bucket._stamp = float(now)
        return bucket

    @property
    def rate_per_s(self) -> float:
        return self._rate_per_s

    @property
    def burst(self) -> float:
        return self._burst

    def tokens_at(self, now: float) -> float:
        """The tokens there at ``now``. The bucket is not changed."""
        elapsed = now - self._stamp
        if not elapsed > 0:  # earlier (or NaN) times add nothing
            return self._tokens
        return min(self._burst, self._tokens + elapsed * self._rate_per_s)

    def _advance(self, now: float) -> float:
        self._tokens = self.tokens_at(now)
        self._stamp = max(self._stamp, now)
        return self._tokens

    def try_take(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens at ``now`` if they are all there; else take none. True if taken."""
        if not n >= 0:  # also NaN: ``_check_n`` raises (checked inline: asked per send)
            _check_n(n)
        tokens = self._advance(now)
        if tokens + EPSILON < n:  # rounding may leave a due token a hair short: see above
            return False
        self._tokens = tokens - n
        return True

    # ``whole_at`` and ``take_whole`` are asked for each bucket of every send: ``tokens_at``
    # is written out in them rather than called.

    def whole_at(self, now: float) -> int:
        """``whole(tokens_at(now))``: the whole tokens there at ``now``. Not changed."""
        elapsed = now - self._stamp
        if not elapsed > 0:
            return math.floor(self._tokens + EPSILON)
        tokens = self._tokens + elapsed * self._rate_per_s
        return math.floor((tokens if tokens < self._burst else self._burst) + EPSILON)

    def take_whole(self, now: float, n: int) -> float:
        """``try_take(now, n)`` for an ``n`` of at most ``whole_at(now)``, which it takes (in
        one call: a limiter takes from each bucket of every send); returns the room the take
        left (tokens short of the burst), which bounds a refund of them."""
        elapsed = now - self._stamp
        if elapsed > 0:
            tokens = self._tokens + elapsed * self._rate_per_s
            self._tokens = (tokens if tokens < self._burst else self._burst) - n
            self._stamp = now
        else:  # an earlier (or NaN) time adds nothing, and the stamp stays the latest seen
            self._tokens -= n
        return self._burst - self._tokens

    def wait_s(self, now: float, n: float = 1.0) -> float:
        """Seconds from ``now`` until ``n`` tokens are there, if nothing else is taken.

        0.0 when they are there now; ``math.inf`` when ``n`` exceeds the burst. When ``now`` is
        earlier than the latest time seen, the refill counts only from that latest time.
        The bucket is not changed.
        """
        if not n >= 0:  # also NaN: ``_check_n`` raises (checked inline: asked per send)
            _check_n(n)
        if n > self._burst:
            return math.inf
        elapsed = now - self._stamp  # ``tokens_at(now)``, written out (asked per send)
        tokens = self._tokens + elapsed * self._rate_per_s if elapsed > 0 else self._tokens
        missing = n - (tokens if tokens < self._burst else self._burst)
        if missing <= EPSILON:
            return 0.0
        ahead_s = self._stamp - now  # ``max(0.0, ahead_s)``, without the call
        return (ahead_s if ahead_s > 0.0 else 0.0) + missing / self._rate_per_s

    def reconfigure(
        self, now: float, rate_per_s: float | None = None, burst: float | None = None
    ) -> None:
        """Bring the bucket up to ``now`` at the old rate, then apply the new rate and burst
        (None keeps one). Tokens are clamped to the new burst. Invalid values raise
        ``ConfigError`` and change nothing."""
        new_rate = self._rate_per_s if rate_per_s is None else rate_per_s
        new_burst = self._burst if burst is None else burst
        check_limit(new_rate, new_burst)
        self._advance(now)
        self._rate_per_s = float(new_rate)
        self._burst = float(new_burst)
        self._tokens = min(self._tokens, self._burst)

    def give(self, now: float, n: float) -> None:
        """Give back ``n`` tokens at ``now`` (a refund); the level never exceeds the burst."""
        if not n >= 0:  # also NaN: ``_check_n`` raises (checked inline: asked per send)
            _check_n(n)
        self._tokens = min(self._burst, self._advance(now) + n)

    def drain(self, now: float) -> None:
        """Empty the bucket at ``now``. A ``now`` later than any seen holds it empty until then."""
        self._advance(now)
        self._tokens = 0.0

    def __repr__(self) -> str:
        return (
            f"<TokenBucket {self._rate_per_s:g}/s burst {self._burst:g}:"
            f" {self._tokens:.3f} tokens at t={self._stamp:.3f}>"
        )
