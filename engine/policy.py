"""Pure policies: how long to back off, what to do with a provider's answer, and in which
order to visit keys.

The dispatcher only carries these decisions out; tests check them as tables.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TypeVar

from engine.domain import BucketKey, BucketScope, NotificationState, Outcome, SendResult
from engine.limiter import Reservation

__all__ = [
    "STORE_OUTAGE",
    "STORE_RETRY",
    "WRITE_RETRY",
    "Backoff",
    "Decision",
    "HeldBuckets",
    "RetryPolicy",
    "decide",
    "round_robin",
]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits that grow after each failure in a row: the ``attempt``-th (from 1) is
    ``min(max_s, first_s * factor ** (attempt - 1))``, of which the last ``jitter`` fraction
    is scaled by a random draw. Every backoff in the engine is one of these."""

    first_s: float
    factor: float = 2.0
    max_s: float = math.inf
    jitter: float = 0.0

    def delay_s(self, attempt: int, rand: float = 1.0) -> float:
        """The wait before retry ``attempt`` (an attempt below 1 counts as 1); ``rand`` is
        uniform in [0, 1) and only matters with ``jitter`` (1.0, the default, is no jitter)."""
        try:
            grown = self.first_s * self.factor ** max(0, attempt - 1)
        except OverflowError:  # a float power past ~1e308; every sane cap is far below
            grown = math.inf
        delay = min(self.max_s, grown)
        if math.isinf(delay):
            return delay  # inf * 0 would be NaN
        return delay * (1.0 - self.jitter) + delay * self.jitter * rand


# The engine's other backoffs, here so that one table tests them all.
STORE_RETRY = Backoff(first_s=0.05, factor=2.0, max_s=2.0)  # a locked or dropped transaction
STORE_OUTAGE = Backoff(first_s=0.5, factor=2.0, max_s=10.0)  # dispatch while the store is down
WRITE_RETRY = Backoff(first_s=1.0, factor=1.0)  # outcomes that could not be written yet


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of transient failures: the n-th waits ``backoff.delay_s(n, rand)``, which
    doubles from ``base_s`` up to ``cap_s``, the last ``jitter`` fraction random."""

    base_s: float = 1.0
    cap_s: float = 300.0
    jitter: float = 0.5
    default_retry_after_s: float = 1.0
    max_retry_after_s: float = 3600.0

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.base_s, 2.0, self.cap_s, self.jitter)

    def backoff_s(self, failures: int, rand: float) -> float:
        """Delay after the ``failures``-th failure (>= 1); ``rand`` is uniform in [0, 1)."""
        return self.backoff.delay_s(failures, rand)


@dataclass(frozen=True, slots=True)
class Decision:
    state: NotificationState
    delay_s: float = 0.0  # from now, when state is QUEUED
    spend_attempt: bool = False
    throttle_s: float | None = None  # hold the provider's bucket empty this long


_DELIVERED = Decision(NotificationState.DELIVERED)  # a frozen value: one serves every send


def decide(
    result: SendResult, *, failures: int, max_attempts: int, policy: RetryPolicy, rand: float
) -> Decision:
    """What happens to a notification after one send; ``failures`` counts earlier transient
    failures, so this send is attempt ``failures + 1`` of ``max_attempts``."""
    if result.outcome is Outcome.DELIVERED:
        return _DELIVERED
    if result.outcome is Outcome.THROTTLED:
        wait_s = result.retry_after_s
        if wait_s is None or math.isnan(wait_s) or wait_s < 0:
            wait_s = policy.default_retry_after_s
        wait_s = min(wait_s, policy.max_retry_after_s)
        return Decision(NotificationState.QUEUED, delay_s=wait_s, throttle_s=wait_s)
    if result.outcome is Outcome.TRANSIENT and failures + 1 < max_attempts:
        delay_s = policy.backoff_s(failures + 1, rand)
        return Decision(NotificationState.QUEUED, delay_s=delay_s, spend_attempt=True)
    return Decision(NotificationState.DEAD, spend_attempt=result.outcome is Outcome.TRANSIENT)


@functools.lru_cache(maxsize=4096)
def send_keys(tenant: str, provider: str) -> tuple[BucketKey, BucketKey, BucketKey]:
    """The buckets a send of ``tenant`` through ``provider`` takes a token from (remembered:
    the dispatcher asks for the same few again and again)."""
    return BucketKey.for_send(tenant, provider)


def round_robin(keys: Sequence[K], last: K | None) -> list[K]:
    """``keys`` (in a stable order) rotated to start just after ``last``, the key served last;
    from the first key when ``last`` is no longer among them."""
    if last is None or not keys:
        return list(keys)
    try:
        start = keys.index(last) + 1
    except ValueError:
        start = 0
    return [*keys[start:], *keys[:start]]


class HeldBuckets:
    """The buckets a dispatch round found empty, by whose they are (a tenant's, a provider's,
    a pair's), each with how long it takes to refill: a key behind one is not asked again in
    that round, and the round's sleep ends no later than the soonest time one of the keys it
    passed over can be granted a token.

    ``providers`` are the providers of the round's keys: once the buckets of all of them are
    held (and no tenant's or pair's), every key left waits behind one, and ``skip`` need not
    look at them one by one (see there)."""

    def __init__(self, providers: AbstractSet[int] = frozenset()) -> None:
        self._tenants: dict[int, float] = {}
        self._providers: dict[int, float] = {}
        self._pairs: dict[tuple[int, int], float] = {}
        self._of = providers
        # The soonest refill of the providers' buckets once all of ``providers`` are held
        # and nothing else is; None otherwise.
        self._covered_s: float | None = None

    def note(self, key: tuple[int, int], reservation: Reservation) -> None:
        """What held ``key``'s (tenant id, provider id) ``reservation`` short, if anything."""
        if not reservation.held_by:  # the common case: asked once per key served
            return
        held_for_s = reservation.held_for_s  # as long as ``held_by``; by index: asked per send
        for i, bucket in enumerate(reservation.held_by):
            for_s = held_for_s[i]
            if bucket.scope is BucketScope.TENANT:
                self._tenants[key[0]] = for_s
            elif bucket.scope is BucketScope.PROVIDER:
                self._providers[key[1]] = for_s
            else:
                self._pairs[key] = for_s
        providers = self._providers
        if self._of and not (self._tenants or self._pairs) and providers.keys() >= self._of:
            self._covered_s = min(providers.values())
        else:
            self._covered_s = None

    def for_s(self, key: tuple[int, int]) -> float | None:
        """How long ``key`` waits for a bucket found empty (the soonest of its buckets held);
        None when none holds it."""
        if not (self._providers or self._tenants or self._pairs):
            return None  # the common case, asked for every key of every round
        best = self._providers.get(key[1])
        tenant_s = self._tenants.get(key[0])
        if tenant_s is not None and (best is None or tenant_s < best):
            best = tenant_s
        pair_s = self._pairs.get(key) if self._pairs else None
        if pair_s is not None and (best is None or pair_s < best):
            best = pair_s
        return best

    def skip(
        self,
        keys: Sequence[tuple[int, int]],
        start: int,
        not_before: Mapping[tuple[int, int], float],
        now: float,
        wait_s: float,
    ) -> tuple[int, float]:
        """Pass over the keys from ``keys[start]`` on that a round does not ask: those whose
        buckets said they grant nothing before ``not_before[key]`` (a monotonic time later
        than ``now``), and those behind a bucket found empty (``for_s``). Returns the index
        of the first key to ask (``len(keys)``: none) and ``wait_s`` lowered to the soonest
        time a passed-over key can be granted: ``not_before[key] - now``, or, behind a held
        bucket, the later of that and the bucket's refill (asked sooner, it would still find
        the bucket empty). A round asks this once per key it serves rather than once per
        key: most keys of most rounds wait behind a shared bucket."""
        covered_s = self._covered_s
        if covered_s is not None:  # every key left waits behind a held provider's bucket:
            if wait_s > covered_s:  # none can be granted sooner than ``covered_s``
                wait_s = self._soonest(keys, start, not_before, now, wait_s, covered_s)
            return len(keys), wait_s
        # Hot: ``x if x < wait_s else wait_s`` is ``min(wait_s, x)`` without the call.
        held = bool(self._providers or self._tenants or self._pairs)
        until_of = not_before.get
        index = start
        for key in keys[start:]:
            until = until_of(key)
            for_s = self.for_s(key) if held else None
            if for_s is None:  # nothing held it this round
                if until is None or until <= now:
                    return index, wait_s
                for_s = until - now
            elif until is not None and until - now > for_s:
                for_s = until - now
            wait_s = for_s if for_s < wait_s else wait_s
            index += 1
        return index, wait_s

    def _soonest(
        self,
        keys: Sequence[tuple[int, int]],
        start: int,
        not_before: Mapping[tuple[int, int], float],
        now: float,
        wait_s: float,
        floor_s: float,
    ) -> float:
        """``skip``'s ``wait_s`` over ``keys[start:]``, all behind held providers' buckets, the
        soonest of which refills in ``floor_s``: the look ends at the first key that can be
        granted then (most keys, whose ``not_before`` has passed)."""
        until_of, provider_s = not_before.get, self._providers.__getitem__
        for i in range(start, len(keys)):
            key = keys[i]
            for_s = provider_s(key[1])
            until = until_of(key)
            if until is not None and until - now > for_s:
                for_s = until - now
            if for_s < wait_s:
                wait_s = for_s
                if wait_s <= floor_s:
                    break
        return wait_s
