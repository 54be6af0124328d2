"""``Plot``: one pyqtgraph plot over time with named curves made on first use, ranges that
move in steps, a sentence for when there is nothing to draw, and the console's theme."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsItem

from ui.history import Array
from ui.plotmath import nice
from ui.theme import Theme

__all__ = ["Plot"]


class Plot:
    """One plot with named curves created on first use."""

    def __init__(self, title: str, unit: str, legend: bool, fixed_max: float | None = None):
        self.widget = pg.PlotWidget()
        self.widget.setMenuEnabled(False)
        self.widget.setMinimumHeight(150)
        self.item = self.widget.getPlotItem()
        self.item.setTitle(title)
        self.item.showGrid(x=True, y=True, alpha=0.2)
        self.item.setLabel("left", unit)
        self.item.setLabel("bottom", "seconds ago")
        self.item.setClipToView(True)
        self.item.setDownsampling(auto=True, mode="peak")
        self.item.setMouseEnabled(x=False, y=False)
        self.item.hideButtons()
        for side in ("left", "bottom"):  # drawn again only when their range moves a step
            cache = QGraphicsItem.CacheMode.DeviceCoordinateCache
            self.item.getAxis(side).setCacheMode(cache)
        self.legend = self.item.addLegend(offset=(8, 4)) if legend else None
        if self.legend is not None:
            self.legend.setColumnCount(3)
        self.smooth = 1  # plot a moving mean over this many samples
        self.fixed_max = fixed_max
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.note: pg.TextItem | None = None
        self.range: tuple[float, float] = (0.0, 0.0)

    def say(self, text: str) -> None:
        """A sentence in the middle of the plot, for when there is nothing to draw."""
        if self.note is None:
            self.note = pg.TextItem(anchor=(0.5, 0.5))
            self.item.addItem(self.note, ignoreBounds=True)
        self.note.setText(text)
        self.note.setVisible(bool(text))
        view = self.item.getViewBox().viewRange()
        self.note.setPos(sum(view[0]) / 2, sum(view[1]) / 2)

    def curve(self, name: str, label: str, colour: QColor, width: float = 2.0) -> pg.PlotDataItem:
        curve = self.curves.get(name)
        if curve is None:
            curve = self.item.plot(name=label, pen=pg.mkPen(colour, width=width))
            self.curves[name] = curve
        return curve

    def drop(self, name: str) -> None:
        curve = self.curves.pop(name, None)
        if curve is not None:
            self.item.removeItem(curve)
            if self.legend is not None:
                self.legend.removeItem(curve)

    def fit(self, x: Array, highest: float, span_s: float) -> None:
        """Ranges move in steps (a 1-2-5 top, a left edge in whole 10 s): the axes, which
        are costly to redraw, change only when a step is crossed."""
        top = self.fixed_max * 1.04 if self.fixed_max is not None else nice(highest * 1.1)
        left = -span_s if x.size == 0 else max(-span_s, min(-10.0, float(x[0])))
        left = math.floor(left / 10) * 10
        if (top, left) != self.range:
            self.range = (top, left)
            self.item.setRange(xRange=(left, 0), yRange=(0, top), padding=0)

    def theme(self, theme: Theme) -> None:
        self.widget.setBackground(theme.background)
        for axis in ("left", "bottom"):
            ax = self.item.getAxis(axis)
            ax.setPen(pg.mkPen(theme.grid))
            ax.setTextPen(pg.mkPen(theme.muted))
        self.item.titleLabel.setText(self.item.titleLabel.text, color=theme.text)
        if self.legend is not None:
            backdrop = QColor(theme.background)
            backdrop.setAlpha(235)  # a box over the oldest data, not a veil over it
            self.legend.setBrush(pg.mkBrush(backdrop))
            self.legend.setLabelTextColor(theme.text)
            for _sample, label in self.legend.items:
                label.setText(label.text, color=theme.text)  # re-rendered in the new colour
        if self.note is not None:
            self.note.setColor(theme.muted)
