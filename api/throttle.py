"""Each API key's request limit, on OmniPost's own token buckets (``engine.TokenBucket``).

A key's bucket is made on its first request and dropped once it is full again (a full bucket
and no bucket answer alike), so memory follows the keys in use, not the keys issued. The
answer carries what the IETF RateLimit header fields say (draft-ietf-httpapi-ratelimit-
headers): the policy (``q`` requests per ``w`` seconds: the burst, and the time the rate takes
to refill it) and what is left of it now.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from engine import Limit, TokenBucket

__all__ = ["KeyBuckets", "Verdict"]

_SWEEP_AT = 4096  # buckets kept before the full ones are swept out


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    remaining: int
    reset_s: int  # until the bucket is full again (or, refused, until a token is there)
    retry_after_s: int  # 0 when allowed
    limit: Limit

    def headers(self) -> dict[str, str]:
        window = max(1, math.ceil(self.limit.burst / self.limit.rate_per_s))
        found = {
            "RateLimit-Policy": f'"per-key";q={int(self.limit.burst)};w={window}',
            "RateLimit": f'"per-key";r={self.remaining};t={self.reset_s}',
        }
        if not self.allowed:
            found["Retry-After"] = str(self.retry_after_s)
        return found


class KeyBuckets:
    """``take(key_id, limit)``: one request of the key, if its bucket allows it now."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._now = monotonic
        self._buckets: dict[int, TokenBucket] = {}

    def take(self, key_id: int, limit: Limit) -> Verdict:
        now = self._now()
        bucket = self._buckets.get(key_id)
        if bucket is None or (bucket.rate_per_s, bucket.burst) != (limit.rate_per_s, limit.burst):
            if len(self._buckets) >= _SWEEP_AT:
                self._sweep(now)
            bucket = self._buckets[key_id] = TokenBucket(limit.rate_per_s, limit.burst, now)
        allowed = bucket.try_take(now)
        tokens = bucket.tokens_at(now)
        if allowed:
            reset = (limit.burst - tokens) / limit.rate_per_s
            return Verdict(True, math.floor(tokens), math.ceil(reset), 0, limit)
        wait = max(1, math.ceil(bucket.wait_s(now)))
        return Verdict(False, 0, wait, wait, limit)

    def _sweep(self, now: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens_at(now) >= b.burst]
        for key_id in full:
            del self._buckets[key_id]

    def __len__(self) -> int:
        return len(self._buckets)
