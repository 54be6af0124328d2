"""The dashboard's bucket panel: the buckets that matter out of thousands: the emptiest and
the busiest, or those whose name matches the filter box; at most ``MAX_GAUGES`` gauges,
whatever the number of buckets configured.

The engine picks them (``SnapshotView`` and ``BucketPicks``): the panel only tells the bridge
what it wants and lays out what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QLineEdit, QScrollArea, QVBoxLayout, QWidget

from engine import Snapshot
from ui.bridge import Bridge
from ui.gauges import BucketGauges, GaugeGroup, scope_order
from ui.views.fills import FILL_BINS

__all__ = ["MAX_GAUGES", "BucketPanel", "bucket_groups"]

MAX_GAUGES = 24
EMPTIEST = 12
BUSIEST = 12


def bucket_groups(snap: Snapshot) -> list[GaugeGroup]:
    """What the panel shows for ``snap``: the buckets matching its filter, or the emptiest
    and the busiest; a snapshot taken without a view (every bucket) in one group."""
    picks = snap.picks
    if picks is None:
        return [GaugeGroup("", snap.buckets)] if snap.buckets else []
    if not picks.configured:
        return []
    if not picks.match.strip() and picks.matching:  # few enough to show them all
        return [GaugeGroup("", tuple(sorted((p.level for p in picks.matching), key=scope_order)))]
    if picks.match.strip():
        shown = len(picks.matching)
        return [
            GaugeGroup(
                f"Matching “{picks.match.strip()}”: {shown} of {picks.matching_total:,}",
                tuple(p.level for p in picks.matching),
                empty="No bucket's name contains that.",
            )
        ]
    return [
        GaugeGroup(
            f"Emptiest, of {picks.configured:,} buckets",
            tuple(p.level for p in picks.emptiest),
            empty="Every bucket used lately is full again.",
        ),
        GaugeGroup(
            "Busiest: sent per second lately",
            tuple(p.level for p in picks.busiest),
            tuple(f"{p.sends_per_s:.1f}/s sent" for p in picks.busiest),
            empty="Nothing was sent lately.",
        ),
    ]


class BucketPanel(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        bridge.set_view(
            replace(
                bridge.view,
                emptiest=EMPTIEST,
                busiest=BUSIEST,
                matched=MAX_GAUGES,
                fill_bins=FILL_BINS,  # the dashboard's map of every bucket's fill
            )
        )
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter buckets by name: a tenant, a provider…")
        self.filter.setClearButtonEnabled(True)
        self.filter.setToolTip(
            "Show the buckets whose name contains this (tenant:acme, pair:acme/sms, "
            f"provider:sms), at most {MAX_GAUGES}; empty: the emptiest and the busiest."
        )
        self.filter.textChanged.connect(self.set_filter)
        self.gauges = BucketGauges()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(self.gauges)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.filter)
        layout.addWidget(scroll, 1)

    def set_filter(self, text: str) -> None:
        """Ask the next snapshots for the buckets matching ``text``."""
        self.bridge.set_view(replace(self.bridge.view, match=text.strip()))

    def show_snapshot(self, snap: Snapshot, colours: Mapping[str, QColor]) -> None:
        self.gauges.set_groups(bucket_groups(snap), colours)
