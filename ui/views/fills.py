"""The fill of every bucket over time, for a console past ``FILL_MAP_FROM`` buckets: at 10,000
tenants a plot of the emptiest few is noise (curves appear and vanish as the ranking moves),
so the dashboard shows instead how many buckets stood at each step of fill at each sample (a
heat map: time across, fill up, the count as colour, on a log scale), and names the emptiest
few beside it; a click on one shows it in the bucket panel.

The counts are the snapshot's (``BucketPicks.fills``, ``SnapshotView.fill_bins``), kept in the
bridge's history as the series ``fills:0`` (emptiest step) to ``fills:{FILL_BINS - 1}``.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import BucketPicks
from ui.fmt import fmt_bucket, fmt_count
from ui.history import History
from ui.theme import Theme
from ui.views.plots import Plot

__all__ = ["FILL_BINS", "FILL_MAP_FROM", "NAMED", "FillMap", "fill_image"]

FILL_BINS = 10  # steps of 10 %
FILL_MAP_FROM = 300  # buckets configured from which the map replaces the emptiest curves
NAMED = 6  # the emptiest buckets named beside the map


def fill_image(history: History, bins: int = FILL_BINS) -> tuple[np.ndarray, float]:
    """The history's counts as an image, one column per sample and one row per step
    (emptiest first), log-scaled (0 where no count was kept), and the seconds the history
    spans; an empty image when no sample carried counts."""
    times = history.times()
    rows = [history.series(f"fills:{b}") for b in range(bins)]
    if not times.size or not all(r.size for r in rows):
        return np.zeros((0, bins)), 0.0
    counts = np.nan_to_num(np.vstack(rows), nan=0.0)
    return np.log1p(counts).T, float(times[-1] - times[0])


class FillMap(QWidget):
    picked = Signal(str)  # a named bucket clicked: its name, as the bucket panel's filter takes

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = Plot("How many buckets at each fill", "% full", legend=False)
        self.plot.item.setLabel("bottom", "seconds ago")
        self.image = pg.ImageItem(axisOrder="col-major")
        self.plot.item.addItem(self.image)
        self.emptiest = QListWidget()
        self.emptiest.setToolTip("Click one to show it in the bucket panel.")
        self.emptiest.itemClicked.connect(self._clicked)
        self.emptiest.setMaximumWidth(190)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        side = QVBoxLayout()
        side.addWidget(QLabel("Emptiest now"))
        side.addWidget(self.emptiest, 1)
        side.addWidget(self.caption)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot.widget, 1)
        layout.addLayout(side)
        self._colours: tuple[QColor, QColor] = (QColor("#ffffff"), QColor("#4e79a7"))

    def theme(self, theme: Theme) -> None:
        self.plot.theme(theme)
        self._colours = (QColor(theme.background), theme.series(0))
        low, high = self._colours
        cmap = pg.ColorMap([0.0, 1.0], [low, high])
        self.image.setLookupTable(cmap.getLookupTable(nPts=64))

    def draw(self, history: History, picks: BucketPicks | None) -> None:
        """Draw the counts kept in ``history`` and name the emptiest of ``picks``."""
        image, span_s = fill_image(history)
        if image.size:
            top = float(image.max()) or 1.0
            self.image.setImage(image, autoLevels=False, levels=(0.0, top))
            self.image.setRect(QRectF(-span_s, 0.0, max(span_s, 1e-3), 100.0))
            self.plot.fit(np.array([-span_s]), 100.0, span_s)
            self.plot.item.setRange(yRange=(0, 100), padding=0)
        self.plot.say("" if image.size else "Counting the buckets…")
        if picks is None:
            return
        self.emptiest.clear()
        if not picks.emptiest:
            self.emptiest.addItem("Every bucket used lately is full again.")
        for pick in picks.emptiest[:NAMED]:
            level = pick.level
            item = QListWidgetItem(f"{fmt_bucket(level.key)}  {level.fill * 100:.0f} %")
            item.setData(Qt.ItemDataRole.UserRole, str(level.key))
            self.emptiest.addItem(item)
        below = sum(picks.fills[:-1]) if picks.fills else 0
        self.caption.setText(
            f"{fmt_count(below)} of {fmt_count(picks.configured)} below "
            f"{100 - 100 // FILL_BINS} % full; the stronger the colour, the more buckets."
        )

    def _clicked(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        if name:
            self.picked.emit(str(name))
