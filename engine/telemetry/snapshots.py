"""A snapshot whose cost follows what a console shows, not the number of tenants.

``Engine.snapshot(view=SnapshotView(...))`` comes here. Per snapshot it reads:

- bucket levels of a bounded set of keys only: the buckets of the pairs that sent last
  (``Telemetry.activity``; a bucket untouched for burst / rate seconds is full, so the
  emptiest are among these), last snapshot's emptiest, the providers', the busiest by the
  activity's rates, those matching the view's name filter (at most ``matched``) and the named
  tenants' own, through ``Limiter.levels(keys)``;
- the depth of the named tenants and of the deepest ones: their rows of the kept counts and
  one index entry each (``OverviewReads.depth_of``);
- every ``totals_every_s``: the totals and the choice of the deepest tenants
  (``OverviewReads.overview``, a pass over the kept counts inside the database); with no
  deepest tenants asked for, the totals per state alone (``OverviewReads.totals``).

The name filter's matches are worked out once per filter text and configuration.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from engine.core.domain import BucketKey, BucketLevel, Limit, NotificationState
from engine.limits.limiter import Limiter
from engine.store import DepthRow, Store, TenantRecord
from engine.store.overview import QueueOverview
from engine.telemetry.activity import Activity
from engine.telemetry.figures import TenantDepth, tenant_depths
from engine.telemetry.snapshot_view import BucketPick, BucketPicks, QueueTotals, SnapshotView

__all__ = [
    "SnapshotRead",
    "SnapshotReads",
    "candidates",
    "fill_counts",
    "levels_of",
    "pick_buckets",
]

RECENT_PAIRS = 192  # pairs that sent last whose buckets are read for the emptiest
RATED_PAIRS = 512  # pairs that sent last whose rates are summed for the busiest
FILL_PART = 512  # levels read between two turns of the loop for the distribution of fills
FULL = 0.999  # a bucket at least this full is not "emptiest"


@dataclass(frozen=True, slots=True)
class SnapshotRead:
    """What one view's snapshot read: depth rows of the tenants it covers and their names,
    the levels to show, the picks, the totals and the deepest tenants."""

    depth_rows: list[DepthRow]
    tenant_names: dict[int, str]
    levels: tuple[BucketLevel, ...]
    picks: BucketPicks
    queue: QueueTotals
    deepest: tuple[TenantDepth, ...]


async def levels_of(limiter: Limiter, keys: Collection[BucketKey]) -> list[BucketLevel]:
    """The levels of the configured buckets among ``keys``, at a cost proportional to
    ``len(keys)`` (``Limiter.levels(keys)``)."""
    return list(await limiter.levels(list(keys)))


def candidates(
    activity: Activity,
    limits: Mapping[BucketKey, Limit],
    now: float,
    recent: int = RECENT_PAIRS,
) -> set[BucketKey]:
    """The configured buckets of the ``recent`` pairs that sent last which may not be full
    yet: taken from less than burst / rate seconds before ``now`` (monotonic s)."""
    found: set[BucketKey] = set()
    for last, keys in activity.recent(recent):
        for key in keys:
            limit = limits.get(key)
            if limit is not None and now - last < limit.burst / limit.rate_per_s:
                found.add(key)
    return found


def pick_buckets(
    levels: Iterable[BucketLevel],
    rates: Mapping[BucketKey, float],
    view: SnapshotView,
    matched: Sequence[BucketKey] = (),
    matching_total: int = 0,
    configured: int = 0,
) -> BucketPicks:
    """From ``levels`` read: the ``view.emptiest`` lowest that are not full (blocked ones
    first, then by fill, then by name), the ``view.busiest`` with the most sends per second
    in ``rates`` (ties by name), and the levels of ``matched`` (emptiest first)."""
    by_key = {level.key: level for level in levels}

    def pick(level: BucketLevel) -> BucketPick:
        return BucketPick(level, rates.get(level.key, 0.0))

    low = [lv for lv in by_key.values() if lv.fill < FULL or lv.blocked_for_s > 0]
    emptiest = heapq.nsmallest(
        view.emptiest, low, key=lambda lv: (lv.blocked_for_s <= 0, lv.fill, str(lv.key))
    )
    busy = [k for k, rate in rates.items() if rate > 0 and k in by_key]
    busiest = heapq.nsmallest(view.busiest, busy, key=lambda k: (-rates[k], str(k)))
    shown = [by_key[k] for k in matched if k in by_key]
    shown.sort(key=lambda lv: (lv.blocked_for_s <= 0, lv.fill, str(lv.key)))
    return BucketPicks(
        emptiest=tuple(pick(lv) for lv in emptiest),
        busiest=tuple(pick(by_key[k]) for k in busiest),
        matching=tuple(pick(lv) for lv in shown[: view.matched]),
        matching_total=matching_total,
        configured=configured,
        match=view.match,
    )


class SnapshotReads:
    """The caches behind a view's snapshots (one per engine): the last overview and when it
    was read, the name filter's matches, the tenant ids by name, last time's emptiest."""

    def __init__(self) -> None:
        # Per number of deepest tenants asked for (views of a console, of the metrics and of
        # a progress line may share an engine): (monotonic s, unix s) read, the overview, and
        # how long the read took (s: ``SnapshotView.totals_most_share`` spaces them by it).
        self._overviews: dict[int, tuple[float, float, QueueOverview, float]] = {}
        self._index_src: Mapping[BucketKey, Limit] | None = None
        self._index: list[tuple[str, BucketKey]] = []
        self._matches: tuple[str, list[BucketKey], int] = ("", [], 0)
        self._ids_src: Mapping[int, TenantRecord] | None = None
        self._ids: dict[str, int] = {}
        self._low: tuple[BucketKey, ...] = ()

    async def read(
        self,
        view: SnapshotView,
        *,
        store: Store,
        limiter: Limiter,
        activity: Activity,
        limits: Mapping[BucketKey, Limit],
        tenants: Mapping[int, TenantRecord],
        providers: Iterable[str],
        now: float,
        wall: float,
    ) -> SnapshotRead:
        """Read what ``view`` shows (see the module's docstring) with the configuration
        ``limits``, ``tenants`` (by id) and ``providers`` (names); ``now`` is monotonic s,
        ``wall`` unix s."""
        overview, overview_wall = await self._overview_at(store, view, now, wall)
        ids = self._tenant_ids(tenants)
        named = [ids[name] for name in view.tenants if name in ids]
        deep_ids = [t for t, _n in overview.deepest]
        rows = await store.overview.depth_of([*named, *deep_ids])
        names = {t: tenants[t].name if t in tenants else str(t) for t in {*named, *deep_ids}}
        depth = {d.tenant: d for d in tenant_depths(rows, names, wall)}
        ranked = sorted((d for d in depth.values() if d.queued), key=lambda d: -d.queued)
        deepest = tuple(ranked[: view.deepest])  # the overview's, and named ones read now

        await asyncio.sleep(0)  # the loop's other work between the steps below (a few ms each)
        # Unconfigured keys too: only the busiest are checked, among the pairs that sent last.
        rates = activity.rates(now, RATED_PAIRS)
        busiest = _busiest(rates, limits, view.busiest)
        matched, matching_total = self._matching(limits, view.match, view.matched)
        own = [BucketKey.for_tenant(name) for name in view.tenants]
        own += view.buckets
        wanted = candidates(activity, limits, now) | {*self._low, *busiest, *matched}
        wanted |= {k for k in own if k in limits}
        wanted |= {k for k in map(BucketKey.for_provider, providers) if k in limits}
        await asyncio.sleep(0)
        levels = await levels_of(limiter, wanted)
        await asyncio.sleep(0)
        picks = pick_buckets(levels, rates, view, matched, matching_total, len(limits))
        if view.fill_bins:
            spread = candidates(activity, limits, now, activity.capacity)
            fills = await _fills(limiter, spread, view.fill_bins, len(limits))
            picks = replace(picks, fills=fills, fills_read=len(spread))
        self._low = tuple(p.level.key for p in picks.emptiest)
        shown = {p.level.key for p in (*picks.emptiest, *picks.busiest, *picks.matching)}
        shown |= set(own)
        return SnapshotRead(
            depth_rows=rows,
            tenant_names=names,
            levels=tuple(lv for lv in levels if lv.key in shown),
            picks=picks,
            queue=_totals(overview, wall, overview_wall),
            deepest=deepest,
        )

    async def _overview_at(
        self, store: Store, view: SnapshotView, now: float, wall: float
    ) -> tuple[QueueOverview, float]:
        """The last overview with ``view.deepest`` tenants and when it was read (unix s), read
        again when ``view.totals_every_s`` have passed. With ``view.totals_first``, the first
        is its totals alone (one sum per state), and the whole overview comes with the next
        snapshot (at 100,000 tenants it took 0.4-0.6 s, most of a console's first sample)."""
        kept = self._overviews.get(view.deepest)
        if kept is not None:
            every_s = view.totals_every_s
            if view.totals_most_share:  # the reads' interval grows with what the last took
                spaced_s = kept[3] / view.totals_most_share
                every_s = spaced_s if spaced_s > every_s else every_s
            if now - kept[0] < every_s:
                return kept[2], kept[1]
        reads = store.overview
        first = kept is None and view.deepest > 0 and view.totals_first
        started_s = time.perf_counter()
        overview = await (
            reads.overview(view.deepest) if view.deepest and not first else reads.totals()
        )
        took_s = time.perf_counter() - started_s
        if len(self._overviews) >= 8:  # a console whose view changed many times
            self._overviews.clear()
        self._overviews[view.deepest] = (
            now - view.totals_every_s if first else now,
            wall,
            overview,
            took_s,
        )
        return overview, wall

    def _tenant_ids(self, tenants: Mapping[int, TenantRecord]) -> dict[str, int]:
        if tenants is not self._ids_src:
            self._ids_src = tenants
            self._ids = {t.name: t.id for t in tenants.values()}
        return self._ids

    def _matching(
        self, limits: Mapping[BucketKey, Limit], text: str, cap: int
    ) -> tuple[list[BucketKey], int]:
        """The first ``cap`` configured keys whose name contains ``text`` (case ignored), by
        name, and how many match in all; worked out again only when the text or the set of
        configured keys changed. With no text: every key when there are at most ``cap``."""
        text = text.strip().lower()
        if not text:  # no filter: every bucket when they are few enough to show
            return (sorted(limits, key=str), len(limits)) if len(limits) <= cap else ([], 0)
        if limits is not self._index_src:
            if self._index_src is None or limits.keys() != self._index_src.keys():
                self._index = sorted((str(k).lower(), k) for k in limits)
                self._matches = ("", [], 0)
            self._index_src = limits
        if self._matches[0] != text:
            found = [key for name, key in self._index if text in name]
            self._matches = (text, found, len(found))
        return self._matches[1][:cap], self._matches[2]


async def _fills(
    limiter: Limiter, keys: Collection[BucketKey], bins: int, configured: int
) -> tuple[int, ...]:
    """``fill_counts`` of the levels of ``keys``, read ``FILL_PART`` at a time with a turn
    of the event loop between parts (thousands of keys at a console's every sample)."""
    counts = [0] * bins
    ordered = list(keys)
    for start in range(0, len(ordered), FILL_PART):
        await asyncio.sleep(0)
        part = await levels_of(limiter, ordered[start : start + FILL_PART])
        counts = [a + b for a, b in zip(counts, fill_counts(part, bins, 0), strict=True)]
    counts[-1] += max(0, configured - len(ordered))
    return tuple(counts)


def fill_counts(levels: Sequence[BucketLevel], bins: int, configured: int) -> tuple[int, ...]:
    """How many of ``configured`` buckets are at each of ``bins`` equal steps of fill,
    emptiest first: ``levels`` in the step of their fill (a blocked one in the first), the
    buckets not among them full (in the last)."""
    counts = [0] * bins
    for level in levels:
        fill = 0.0 if level.blocked_for_s > 0 else min(1.0, max(0.0, level.fill))
        counts[min(bins - 1, int(fill * bins))] += 1
    counts[-1] += max(0, configured - len(levels))
    return tuple(counts)


def _busiest(
    rates: Mapping[BucketKey, float], limits: Mapping[BucketKey, Limit], n: int
) -> list[BucketKey]:
    """The ``n`` configured keys with the highest ``rates``."""
    found: list[BucketKey] = []
    for key in sorted(rates, key=rates.__getitem__, reverse=True):
        if len(found) >= n:
            break
        if key in limits:
            found.append(key)
    return found


def _totals(overview: QueueOverview, wall: float, read_at: float) -> QueueTotals:
    S = NotificationState
    t = overview.totals
    oldest = overview.oldest_enqueued_at
    return QueueTotals(
        queued=t.get(S.QUEUED, 0),
        leased=t.get(S.LEASED, 0),
        delivered=t.get(S.DELIVERED, 0),
        dead=t.get(S.DEAD, 0),
        cancelled=t.get(S.CANCELLED, 0),
        suppressed=t.get(S.SUPPRESSED, 0),
        scheduled=t.get(S.SCHEDULED, 0),
        expired=t.get(S.EXPIRED, 0),
        tenants_queued=overview.tenants_queued,
        oldest_queued_age_s=None if oldest is None else max(0.0, wall - oldest),
        read_at=read_at,
    )
