"""The live dashboard: headline figures, the buckets that matter (``ui.views.buckets``), the
deepest queues, and four plots over time.

Curves are created once per series and fed with ``setData`` from the bridge's ring buffers on
each sample (pyqtgraph's ``scrollingPlots`` example); a hidden dashboard skips the redraw and
catches up when shown.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QFont, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine import QueueTotals, Snapshot, TenantDepth
from ui.bridge import Bridge
from ui.fmt import fmt_bucket, fmt_count, fmt_duration, fmt_latency
from ui.history import Array
from ui.plotmath import moving_mean, peak
from ui.queue_models import DepthModel
from ui.theme import LIGHT, Theme
from ui.views.buckets import BucketPanel
from ui.views.fills import FILL_MAP_FROM, FillMap
from ui.views.plots import Plot

__all__ = ["Dashboard", "Stat"]

# Antialiased wide lines cost several times more to paint (measured with bench/console.py);
# the plots redraw twice a second while the engine shares the thread.
pg.setConfigOptions(antialias=False)

_CURVES = 5  # at most, in the bucket fill and queued plots
_STAGGER_MS = 25
_OUTCOMES = {
    "delivered_per_s": ("delivered", "#59a14f"),
    "throttled_per_s": ("throttled", "#edc948"),
    "failed_per_s": ("failed", "#e15759"),
}
_LATENCY = {
    "p50_ms": ("p50", "#4e79a7"),
    "p95_ms": ("p95", "#f28e2b"),
    "p99_ms": ("p99", "#e15759"),
}
_FULL = 97.0  # a bucket whose mean fill stayed above this (in %) did not hold anything back


# DepthModel's columns of the states most queues never have, by index, and their fields.
_RARE_DEPTH_COLUMNS = ((2, "scheduled"), (6, "cancelled"), (7, "expired"))


class Stat(QFrame):
    """A headline figure with its caption."""

    def __init__(self, caption: str, tip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setToolTip(tip)
        self.value = QLabel("—")
        font = QFont(self.value.font())
        font.setPointSizeF(font.pointSizeF() * 1.7)
        font.setBold(True)
        self.value.setFont(font)
        self.caption = QLabel(caption)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(0)
        layout.addWidget(self.value)
        layout.addWidget(self.caption)

    def set(self, text: str, alarm: bool = False, colour: str = "#d64545") -> None:
        """Show ``text``, in ``colour`` when ``alarm``; only what changed is set again (a
        style sheet set re-polishes the label, twice a second for nothing)."""
        if text != self.value.text():
            self.value.setText(text)
        style = f"color: {colour};" if alarm else ""
        if style != self.value.styleSheet():
            self.value.setStyleSheet(style)


class Dashboard(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._theme = LIGHT
        self._colours: dict[str, QColor] = {}
        self._families: dict[str, int] = {}
        self._dirty = False
        self._latest: Snapshot | None = None
        self.last_refresh_s = 0.0
        self.full_refresh_s = 0.0
        self._build()
        bridge.sampled.connect(self.on_sample)

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        self.stats = {
            "delivered": Stat("delivered / s", "Deliveries per second, over the last 2 s."),
            "throttled": Stat("throttled / s", "Provider 429s per second: requeued, not lost."),
            "failed": Stat("failed / s", "Failed sends per second (retried, or dead)."),
            "queued": Stat("queued", "Notifications waiting, over all tenants."),
            "scheduled": Stat("scheduled", "Notifications waiting for their send time."),
            "oldest": Stat("oldest waiting", "Age of the oldest queued notification."),
            "p95": Stat("p95 latency", "95% of deliveries took at most this, enqueue to sent."),
            "dead": Stat("dead", "Notifications that will not be retried without you."),
            "expired": Stat(
                "expired", "Notifications whose deadline passed before they were sent."
            ),
            "late": Stat(
                "late p99",
                "How much later than their send time scheduled notifications first went (p99).",
            ),
        }
        strip = QHBoxLayout()
        for stat in self.stats.values():
            strip.addWidget(stat)
        for rare in ("scheduled", "expired", "late"):
            self.stats[rare].hide()
        self.live_button = QPushButton("Pause live view")
        self.live_button.setCheckable(True)
        self.live_button.setToolTip(
            "Freeze the dashboard; sampling and the engine go on. (Ctrl+Space)"
        )
        self.live_button.toggled.connect(self.set_paused)
        strip.addWidget(self.live_button, 0, Qt.AlignmentFlag.AlignVCenter)

        self.buckets = BucketPanel(self.bridge)
        self.gauges = self.buckets.gauges
        self.depth_model = DepthModel(self)
        self.depth_table = QTableView()
        self.depth_table.setModel(self.depth_model)
        self.depth_table.verticalHeader().hide()
        self.depth_table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.depth_table.horizontalHeader().setStretchLastSection(True)
        self.depth_table.setSelectionMode(QTableView.SelectionMode.NoSelection)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(_heading("Buckets — tokens left of the burst"))
        left_layout.addWidget(self.buckets, 3)
        self.queues_heading = _heading("Deepest queues")
        left_layout.addWidget(self.queues_heading)
        left_layout.addWidget(self.depth_table, 2)

        self.fill_plot = Plot("Fill of the emptiest buckets", "%", legend=True, fixed_max=100)
        if self.fill_plot.legend is not None:
            self.fill_plot.legend.setColumnCount(2)  # bucket names are long
        self.depth_plot = Plot("Queued: the deepest tenants", "notifications", legend=True)
        self.rate_plot = Plot("Outcomes per second", "per s", legend=True)
        self.latency_plot = Plot("Enqueue → delivery latency", "ms", legend=True)
        self.fill_map = FillMap()  # instead of the fill plot, past FILL_MAP_FROM buckets
        self.fill_map.picked.connect(self.buckets.filter.setText)
        self.fill_stack = QStackedWidget()
        self.fill_stack.addWidget(self.fill_plot.widget)
        self.fill_stack.addWidget(self.fill_map)
        plots = QWidget()
        grid = QGridLayout(plots)
        grid.setContentsMargins(0, 0, 0, 0)
        for i, plot in enumerate(self.plots):
            grid.addWidget(self.fill_stack if i == 0 else plot.widget, i // 2, i % 2)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(plots)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 5)
        splitter.setSizes([380, 900])
        layout = QVBoxLayout(self)
        layout.addLayout(strip)
        layout.addWidget(splitter, 1)

    @property
    def plots(self) -> tuple[Plot, Plot, Plot, Plot]:
        return (self.fill_plot, self.depth_plot, self.rate_plot, self.latency_plot)

    def apply_theme(self, theme: Theme) -> None:
        self._theme = theme
        for plot in self.plots:
            plot.theme(theme)
        self.fill_map.theme(theme)

    @property
    def paused(self) -> bool:
        return self.live_button.isChecked()

    def set_paused(self, paused: bool) -> None:
        """Freeze the dashboard to look at it; sampling (history, log, the simulator's
        clock) goes on, and resuming shows the present again."""
        self.live_button.setChecked(paused)
        self.live_button.setText("Resume live view" if paused else "Pause live view")
        if not paused and self._latest is not None:
            self.refresh(self._latest)

    # -- updates ---------------------------------------------------------------------------

    def on_sample(self, snap: Snapshot) -> None:
        self._latest = snap
        if not self.isVisible() or self.paused:
            self._dirty = True
            return
        self.refresh(snap)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._dirty and self._latest is not None and not self.paused:
            self.refresh(self._latest)

    def refresh(self, snap: Snapshot) -> None:
        """Redraw everything from ``snap`` and the bridge's history."""
        self.full_refresh_s = self.last_refresh_s  # the refresh before, all its parts run
        self.last_refresh_s = 0.0  # the plots' parts add theirs as they run
        started = time.perf_counter()
        self._dirty = False
        self._stats(snap)
        self.buckets.show_snapshot(snap, self._bucket_colours(snap))
        self.last_refresh_s += time.perf_counter() - started
        self._curves(snap)

    def _stats(self, snap: Snapshot) -> None:
        totals = snap.queue or QueueTotals()
        queued, dead = totals.queued, totals.dead
        oldest = totals.oldest_queued_age_s or 0.0
        having = totals.tenants_queued
        self.queues_heading.setText(
            f"Deepest queues — {fmt_count(having)} tenants have work"
            if having is not None and having > len(snap.deepest)
            else "Deepest queues"
        )
        rates = self.bridge.rates
        self.stats["delivered"].set(f"{rates.delivered_per_s:.1f}")
        self.stats["throttled"].set(
            f"{rates.throttled_per_s:.1f}", rates.throttled_per_s > 0, "#c98a12"
        )
        self.stats["failed"].set(f"{rates.failed_per_s:.1f}", rates.failed_per_s > 0, "#d64545")
        self.stats["queued"].set(fmt_count(queued))
        self.stats["oldest"].set(fmt_duration(oldest) if queued else "—", oldest > 60)
        self.stats["p95"].set(fmt_latency(snap.latency_p95_s))
        self.stats["dead"].set(fmt_count(dead), dead > 0)
        # The rarer figures show only once there is something to count: the strip stays as
        # narrow as the window may be.
        self.stats["scheduled"].set(fmt_count(totals.scheduled))
        self.stats["scheduled"].setVisible(totals.scheduled > 0)
        self.stats["expired"].set(fmt_count(totals.expired), totals.expired > 0, "#c98a12")
        self.stats["expired"].setVisible(totals.expired > 0)
        late = snap.lateness_p99_s
        self.stats["late"].set(fmt_latency(late), late is not None and late > 1.0, "#c98a12")
        self.stats["late"].setVisible(late is not None)

    def _colour(self, name: str) -> QColor:
        """A colour per series, stable for the session; each family (fill, queued) cycles
        through the palette on its own."""
        colour = self._colours.get(name)
        if colour is None:
            family = name.partition(":")[0]
            index = self._families.get(family, 0)
            self._families[family] = index + 1
            colour = self._colours[name] = self._theme.series(index)
        return colour

    def _bucket_colours(self, snap: Snapshot) -> dict[str, QColor]:
        return {str(b.key): self._colour(f"fill:{b.key}") for b in snap.buckets}

    def _depth_rows(self, rows: Sequence[TenantDepth]) -> None:
        """The deepest queues, with the rarer states' columns (scheduled, cancelled,
        expired) shown only while a row has some: the table stays narrow enough to read."""
        self.depth_model.set_rows(rows)
        for column, field in _RARE_DEPTH_COLUMNS:
            self.depth_table.setColumnHidden(column, not any(getattr(r, field) for r in rows))

    def _curves(self, snap: Snapshot) -> None:
        """Feed the queues table and the four plots one after the other, ``_STAGGER_MS``
        apart, after the figures and gauges: each repaints on its own, and the engine's
        callbacks run in between instead of waiting for all of them (one repaint of the
        whole dashboard took longer than a frame)."""
        deepest = snap.deepest if snap.picks is not None else snap.depth
        parts = (
            lambda: self._depth_rows(deepest),
            lambda: self._fill_curves(snap),
            self._depth_curves,
            lambda: self._feed_fixed(self.rate_plot, _OUTCOMES),
            lambda: self._feed_fixed(self.latency_plot, _LATENCY),
        )
        for index, part in enumerate(parts, start=1):
            QTimer.singleShot(index * _STAGGER_MS, self, functools.partial(self._timed, part))

    def _timed(self, part: Callable[[], None]) -> None:
        started = time.perf_counter()
        part()
        self.last_refresh_s += time.perf_counter() - started

    def _x(self) -> Array:
        """Sample times as seconds before the newest sample."""
        t = self.bridge.history.times()
        return t - t[-1] if t.size else t

    def _fill_curves(self, snap: Snapshot) -> None:
        many = snap.picks is not None and snap.picks.configured >= FILL_MAP_FROM
        self.fill_stack.setCurrentWidget(self.fill_map if many else self.fill_plot.widget)
        if many:
            self.fill_map.draw(self.bridge.history, snap.picks)
            for name in list(self.fill_plot.curves):
                self.fill_plot.drop(name)
            self.bridge.plotted_fills = set()
            return
        self._smoothing()
        self._feed(self.fill_plot, self._emptiest(snap))
        self.bridge.plotted_fills = set(self.fill_plot.curves)
        self.fill_plot.say(
            ""
            if self.fill_plot.curves or not snap.buckets
            else "Every bucket stayed nearly full: no limit held anything back."
        )

    def _depth_curves(self) -> None:
        self._feed(self.depth_plot, self._deepest())
        self.depth_plot.say("" if self.depth_plot.curves else "Nothing has queued up.")

    def _smoothing(self) -> None:
        # A bucket refills between samples and is drained again: raw levels are a saw-tooth.
        # The fill plot shows each bucket's mean over the last second; the gauges, the level.
        self.fill_plot.smooth = max(1, round(1000 / self.bridge.interval_ms))

    def _emptiest(self, snap: Snapshot) -> dict[str, str]:
        """The buckets that ran lowest over the visible window, none that stayed nearly
        full: a dozen saw-tooth curves would tell nothing."""
        labels = self.bridge.fill_labels or {
            f"fill:{level.key}": fmt_bucket(level.key) for level in snap.buckets
        }
        names = list(labels)  # the fill series kept: a bounded few, their means in one go
        if not names or not len(self.bridge.history):
            return _choose(self.fill_plot, {})
        table = np.vstack([self.bridge.history.series(name) for name in names])
        seen = ~np.isnan(table)
        counts = seen.sum(axis=1)
        means = np.where(seen, table, 0.0).sum(axis=1) / np.maximum(counts, 1)
        scores = {
            name: (float(mean), labels[name])
            for name, mean, n in zip(names, means, counts, strict=True)
            if n and mean < _FULL
        }
        return _choose(self.fill_plot, scores)

    def _deepest(self) -> dict[str, str]:
        """The tenants with the most queued, over the visible window."""
        scores = {}
        for name in self.bridge.history.names("queued:"):
            y = self.bridge.history.series(name)
            if (top := peak(y)) > 0:
                scores[name] = (-top, name.removeprefix("queued:"))
        return _choose(self.depth_plot, scores)

    def _feed(self, plot: Plot, names: dict[str, str]) -> None:
        x = self._x()
        for gone in plot.curves.keys() - names.keys():
            plot.drop(gone)
        highest = 0.0
        for name, label in names.items():
            y = moving_mean(self.bridge.history.series(name), plot.smooth)
            plot.curve(name, label, self._colour(name)).setData(x, y, connect="finite")
            highest = max(highest, peak(y))
        plot.fit(x, highest, self.bridge.history_s)

    def _feed_fixed(self, plot: Plot, names: dict[str, tuple[str, str]]) -> None:
        x = self._x()
        highest = 0.0
        for name, (label, colour) in names.items():
            y = self.bridge.history.series(name)
            plot.curve(name, label, QColor(colour)).setData(x, y, connect="finite")
            highest = max(highest, peak(y))
        plot.fit(x, highest, self.bridge.history_s)


def _choose(plot: Plot, scores: dict[str, tuple[float, str]]) -> dict[str, str]:
    """Up to ``_CURVES`` names with the lowest scores, as {name: label}. Curves shown already
    stay while they still have a score, so the plot does not flicker as the ranking shifts;
    and fewer curves (and legend entries) keep the redraw cheap."""
    chosen = [name for name in plot.curves if name in scores][:_CURVES]
    for name in sorted(scores, key=lambda n: scores[n][0]):
        if len(chosen) >= _CURVES:
            break
        if name not in chosen:
            chosen.append(name)
    return {name: scores[name][1] for name in chosen}


def _heading(text: str) -> QLabel:
    label = QLabel(text)
    font = QFont(label.font())
    font.setBold(True)
    label.setFont(font)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
    return label
