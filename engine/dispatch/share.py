"""Which tenants' pairs this worker serves, when several workers share one store.

Every worker used to keep every pair with work in its book: at ten thousand tenants with a row
or two per pair, four workers reserved tokens and claimed for the same pairs at the same moments,
and all but the first found the rows taken (a claim, a retake and a look alone, for nothing).
So the pairs are shared out: each tenant belongs to one of the live workers (those whose
heartbeat says ``running``), by a hash of its id scaled to the number of workers, in the
order of their ids (``engine.store.share_index``): the same answer in every process that sees
the same workers, and in the store's read of the counts, which sends a worker only the pairs of
its own tenants (and the deep ones): at ten thousand tenants each look read 30,000 rows, in
every worker. A worker joining or leaving moves tenants among the others too (rendezvous
hashing would move fewer, but cost a hash per worker and tenant: half a second at 100,000
tenants and four workers); a worker silent for ``worker_ttl_s`` (15 s), by each worker's own
clock, drops out of the list, well within its leases (30 s), and its tenants go to the others.

A pair with a deep backlog (``SHARED_DEPTH`` rows or more) is served by every worker: its
rows are many, so claims of several workers take different rows (SKIP LOCKED), and one
tenant's backlog is not held to one worker's senders.

While two workers' lists differ (a heartbeat apart), a tenant may have two owners for a moment
(a claim finds its rows taken: counted, harmless) or none (its pairs wait until the lists agree,
a heartbeat or two). Pure: given the lists, nothing is awaited. Not thread-safe; one loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.store import Share, share_index

__all__ = ["SHARED_DEPTH", "Shares"]

SHARED_DEPTH = 256  # a pair with this many rows queued is served by every worker


class Shares:
    """The live workers (``workers``, set from heartbeats) and whether a tenant is ``mine``."""

    def __init__(self, me: str) -> None:
        self.me = me
        self.workers: tuple[str, ...] = (me,)
        self._index = 0  # this worker's place among them
        self._mine: dict[int, bool] = {}  # tenant id -> owned here, for the current workers

    @property
    def alone(self) -> bool:
        """Only this worker is live: every tenant is its own."""
        return len(self.workers) <= 1

    def set_workers(self, workers: Sequence[str]) -> bool:
        """The live, dispatching workers (this one among them or not: it is added); returns
        whether the list changed (then every tenant's owner is worked out again)."""
        live = tuple(sorted({*workers, self.me}))
        if live == self.workers:
            return False
        self.workers = live
        self._index = live.index(self.me)
        self._mine = {}
        return True

    def mine(self, tenant_id: int) -> bool:
        """Whether this worker serves ``tenant_id``'s pairs (a deep pair aside)."""
        if len(self.workers) <= 1:
            return True
        known = self._mine.get(tenant_id)
        if known is None:
            known = self._mine[tenant_id] = self._owner_is_me(tenant_id)
        return known

    def _owner_is_me(self, tenant_id: int) -> bool:
        return share_index(tenant_id, len(self.workers)) == self._index

    @property
    def share(self) -> Share | None:
        """This worker's part, for the store's read of the counts (None: alone, all of it)."""
        if len(self.workers) <= 1:
            return None
        return Share(self._index, len(self.workers), SHARED_DEPTH)

    def serves(self, tenant_id: int, queued: int) -> bool:
        """Whether this worker serves a pair of ``tenant_id`` with ``queued`` rows."""
        return queued >= SHARED_DEPTH or self.mine(tenant_id)

    def __repr__(self) -> str:
        return f"Shares(me={self.me!r}, workers={len(self.workers)}, known={len(self._mine)})"
