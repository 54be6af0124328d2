"""What a console asks a snapshot for (``SnapshotView``), and the bounded answers it gets
(``BucketPicks``, ``QueueTotals``): values only, no engine here."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.domain import BucketKey, BucketLevel

__all__ = ["BRIEF_VIEW", "BucketPick", "BucketPicks", "QueueTotals", "SnapshotView"]


@dataclass(frozen=True, slots=True)
class SnapshotView:
    """What one console shows, so that ``Engine.snapshot(view=...)`` reads only that.

    ``emptiest`` and ``busiest``: how many of each kind of bucket to pick; ``match``: buckets
    whose name (``tenant:acme``, ``pair:acme/sms``, ``provider:sms``) contains this text, case
    ignored, at most ``matched`` of them; ``tenants``: tenants whose queue and own bucket are
    wanted whatever their rank (the rows on screen, a running burst's); ``buckets``: buckets
    whose levels are wanted every time (those plotted); ``deepest``: how many
    of the tenants with the most queued to list (chosen among those of the last overview and
    the named tenants, whose queues are read every time; 0: none, and the totals are the
    notifications per state alone, one sum per state over the kept counts, with nothing read
    per tenant: the view of a progress line, ``BRIEF_VIEW``); ``totals_every_s``: how stale the
    totals (and the overview's deepest tenants) may be, since reading them scans the kept
    counts; ``events``: the status events' outbox per endpoint too (the metrics' view), read at
    most every five seconds; ``totals_first``: the first snapshot of this view reads the totals
    alone (one sum per state) and the next one the whole overview (a console opening on
    100,000 tenants shows its figures at once, the deepest tenants a sample later);
    ``totals_most_share``: above 0, the most of the time the totals' reads may take: they come
    no closer together than what the last took divided by it, so that their cost does not grow
    with the tenants (the sum per state reads every row of the kept counts: 30 ms at 10,000
    tenants here, about ten times that at 100,000).
    """

    emptiest: int = 8
    busiest: int = 8
    match: str = ""
    matched: int = 24
    tenants: tuple[str, ...] = ()
    buckets: tuple[BucketKey, ...] = ()
    deepest: int = 8
    totals_every_s: float = 5.0
    fill_bins: int = 0
    events: bool = False
    totals_first: bool = False
    totals_most_share: float = 0.0


@dataclass(frozen=True, slots=True)
class BucketPick:
    """One bucket's level and the sends per second taken from it lately (by this engine)."""

    level: BucketLevel
    sends_per_s: float


@dataclass(frozen=True, slots=True)
class BucketPicks:
    """The buckets a view asked for. ``emptiest``: the lowest of those taken from recently
    (a bucket untouched for burst / rate seconds is full), emptiest first, full ones left out;
    ``busiest``: the most sends per second lately, busiest first; ``matching``: those whose
    name matches ``SnapshotView.match`` (emptiest first), ``matching_total`` of them in all
    (with no ``match``: every bucket, when at most ``SnapshotView.matched`` are configured);
    ``configured``: buckets with a limit, in all; ``fills``: with ``SnapshotView.fill_bins``,
    how many configured buckets are at each step of fill, emptiest step first (a bucket at
    fill f in step ``min(bins - 1, floor(f * bins))``, a blocked one in the first): the levels
    read are those of the pairs the activity record keeps that sent within burst / rate
    seconds, every other bucket is full (``fills_read``: how many were read)."""

    emptiest: tuple[BucketPick, ...] = ()
    busiest: tuple[BucketPick, ...] = ()
    matching: tuple[BucketPick, ...] = ()
    matching_total: int = 0
    configured: int = 0
    match: str = ""
    fills: tuple[int, ...] = ()
    fills_read: int = 0


@dataclass(frozen=True, slots=True)
class QueueTotals:
    """The queue over every tenant: notifications per state, how many tenants have queued
    work, the age of the oldest queued notification (None: nothing queued), and ``read_at``
    (unix s): when these were read (they may be ``SnapshotView.totals_every_s`` old). A view
    that ranks no tenant (``deepest=0``) reads neither of the per-tenant figures: both None."""

    queued: int = 0
    leased: int = 0
    delivered: int = 0
    dead: int = 0
    cancelled: int = 0
    suppressed: int = 0
    scheduled: int = 0
    expired: int = 0
    tenants_queued: int | None = 0
    oldest_queued_age_s: float | None = None
    read_at: float = 0.0


# A worker's progress line, ``omnipost stats`` and the metrics while dispatching: the four
# emptiest buckets among those taken from lately, the totals per state (a second old, or as
# old as keeps their reads to 1% of the time: 3 s at 10,000 tenants here), and nothing per
# tenant: about the same cost at 10 and at 100,000 tenants.
BRIEF_VIEW = SnapshotView(
    emptiest=4, busiest=0, matched=0, deepest=0, totals_every_s=1.0, totals_most_share=0.01
)
