"""Fill gauges for every bucket, painted in one widget: cheap to redraw on every sample."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from engine import BucketLevel
from ui.fmt import fmt_bucket, fmt_duration, fmt_rate
from ui.theme import fill_colour

__all__ = ["BucketGauges"]

_ROW_H = 34
_MIN_COLUMN_W = 260
_SCOPE_ORDER = {"tenant": 0, "provider": 1, "pair": 2}


def _order(level: BucketLevel) -> tuple[int, str, str]:
    return (_SCOPE_ORDER.get(str(level.key.scope), 3), level.key.tenant, level.key.provider)


class BucketGauges(QWidget):
    """One row per bucket: its name and rate, a bar of tokens / burst coloured as it nears
    empty, and the token count. A blocked bucket (a provider said 429) is grey."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._levels: list[BucketLevel] = []
        self._colours: dict[str, QColor] = {}
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.setToolTip(
            "Tokens left in each bucket. A send takes one token from every bucket that applies "
            "(its tenant, its provider, and the pair); buckets refill at their rate."
        )

    @property
    def levels(self) -> list[BucketLevel]:
        return list(self._levels)

    def set_levels(
        self, levels: Sequence[BucketLevel], colours: Mapping[str, QColor] | None = None
    ) -> None:
        """Show ``levels``; ``colours`` (by ``str(key)``) mark each bucket like its curve."""
        ordered = sorted(levels, key=_order)
        if colours is not None:
            self._colours = dict(colours)
        if ordered != self._levels:
            resized = len(ordered) != len(self._levels)
            self._levels = ordered
            if resized:
                self.updateGeometry()
            self.update()

    def _columns(self, width: int) -> int:
        return max(1, min(3, width // _MIN_COLUMN_W))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        rows = math.ceil(max(1, len(self._levels)) / self._columns(width))
        return rows * _ROW_H + 8

    def sizeHint(self) -> QSize:
        return QSize(2 * _MIN_COLUMN_W, self.heightForWidth(2 * _MIN_COLUMN_W))

    def minimumSizeHint(self) -> QSize:
        return QSize(_MIN_COLUMN_W, self.heightForWidth(max(self.width(), _MIN_COLUMN_W)))

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        if not self._levels:
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(
                self.rect(),
                Qt.AlignmentFlag.AlignCenter,
                "No rate limits are configured: every bucket is unlimited.",
            )
            return
        columns = self._columns(self.width())
        column_w = self.width() / columns
        for index, level in enumerate(self._levels):
            row, column = divmod(index, columns)
            cell = QRectF(column * column_w + 4, row * _ROW_H + 4, column_w - 12, _ROW_H - 6)
            self._paint_gauge(painter, cell, level, palette)
        painter.end()

    def _paint_gauge(
        self, painter: QPainter, cell: QRectF, level: BucketLevel, palette: QPalette
    ) -> None:
        metrics = QFontMetrics(self.font())
        text_h = metrics.height()
        text = palette.color(QPalette.ColorRole.WindowText)
        muted = palette.color(QPalette.ColorRole.PlaceholderText)
        blocked = level.blocked_for_s > 0
        right = (
            f"blocked {fmt_duration(level.blocked_for_s)}"
            if blocked
            else f"{level.tokens:.0f} / {level.burst:g}  ·  {fmt_rate(level.rate_per_s)}"
        )
        right_w = metrics.horizontalAdvance(right) + 4
        swatch = self._colours.get(str(level.key))
        indent = 0.0
        if swatch is not None:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(swatch)
            painter.drawEllipse(QRectF(cell.left(), cell.top() + text_h / 2 - 4, 8, 8))
            indent = 13.0
        label_rect = QRectF(
            cell.left() + indent, cell.top(), cell.width() - right_w - indent, text_h
        )
        painter.setPen(text)
        painter.drawText(
            label_rect,
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            metrics.elidedText(
                fmt_bucket(level.key), Qt.TextElideMode.ElideRight, int(label_rect.width())
            ),
        )
        painter.setPen(muted)
        painter.drawText(
            QRectF(cell.right() - right_w, cell.top(), right_w, text_h),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            right,
        )
        bar = QRectF(cell.left(), cell.top() + text_h + 3, cell.width(), 8)
        painter.setPen(Qt.PenStyle.NoPen)
        track = QColor(muted)
        track.setAlpha(60)
        painter.setBrush(track)
        painter.drawRoundedRect(bar, 4, 4)
        if level.fill > 0:
            filled = QRectF(bar.left(), bar.top(), max(bar.height(), bar.width() * level.fill), 8)
            painter.setBrush(fill_colour(level.fill, blocked))
            painter.drawRoundedRect(filled, 4, 4)
