"""Which (tenant, provider) pairs sent lately, and how fast: a bounded record kept by
``Telemetry`` on every completion, from which a snapshot finds the buckets that matter without
reading every bucket's level.

A bucket nobody took a token from for burst / rate seconds is full again, so the emptiest
buckets are among those of the pairs that sent last; the busiest are those whose pairs send
most. The record keeps the ``capacity`` pairs that completed a send most recently (a pair that
sends often is touched often, so it stays), each with an exponentially decayed count of its
sends. Memory and every read are bounded by ``capacity``, whatever the number of tenants.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator

from engine.core.domain import BucketKey

__all__ = ["Activity"]

_TAU_S = 5.0  # the decay's time constant: a rate over roughly the last 5 s


class _Entry:
    __slots__ = ("count", "keys", "last")

    def __init__(self, last: float, keys: tuple[BucketKey, ...]) -> None:
        self.last = last  # monotonic s of the pair's latest completed send
        self.count = 1.0  # its sends, each decayed by e^(-age / tau)
        self.keys = keys  # its tenant's, provider's and pair's bucket keys


class Activity:
    __slots__ = ("_pairs", "capacity", "tau_s")

    def __init__(self, capacity: int = 512, *, tau_s: float = _TAU_S) -> None:
        if capacity < 1:
            raise ValueError(f"an activity record keeps at least 1 pair, not {capacity!r}.")
        self.capacity = capacity
        self.tau_s = tau_s
        self._pairs: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pairs)

    def touch(self, tenant: str, provider: str, now: float) -> None:
        """One send of (``tenant``, ``provider``) completed at ``now`` (monotonic s): O(1); the
        pair that sent longest ago is forgotten once more than ``capacity`` are kept."""
        pair = (tenant, provider)
        pairs = self._pairs
        entry = pairs.get(pair)
        if entry is None:
            pairs[pair] = _Entry(now, BucketKey.for_send(tenant, provider))
            if len(pairs) > self.capacity:
                pairs.popitem(last=False)
            return
        entry.count = entry.count * math.exp(min(0.0, entry.last - now) / self.tau_s) + 1.0
        entry.last = now
        pairs.move_to_end(pair)

    def recent(self, n: int) -> Iterator[tuple[float, tuple[BucketKey, ...]]]:
        """(last send, bucket keys) of the ``n`` pairs that sent most recently, newest first."""
        for index, entry in enumerate(reversed(self._pairs.values())):
            if index >= n:
                return
            yield entry.last, entry.keys

    def rates(self, now: float, recent: int | None = None) -> dict[BucketKey, float]:
        """Sends per second lately of every bucket of the pairs kept (of the ``recent`` that
        sent last, when given: a pair that sends often sent lately; a tenant's and a
        provider's sum their pairs'), as the decayed counts stand at ``now``."""
        found: dict[BucketKey, float] = {}
        tau = self.tau_s
        for index, entry in enumerate(reversed(self._pairs.values())):
            if recent is not None and index >= recent:
                break
            rate = entry.count * math.exp(min(0.0, entry.last - now) / tau) / tau
            for key in entry.keys:
                found[key] = found.get(key, 0.0) + rate
        return found

    def forget(self) -> None:
        self._pairs.clear()

    def __repr__(self) -> str:
        return f"Activity({len(self._pairs)}/{self.capacity} pairs)"
