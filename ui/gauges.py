"""Fill gauges for a bounded set of buckets, in groups under headings, painted in one widget:
cheap to redraw on every sample whatever the number of buckets configured."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from engine import BucketLevel
from ui.fmt import fmt_bucket, fmt_duration, fmt_rate
from ui.theme import fill_colour

__all__ = ["BucketGauges", "GaugeGroup", "scope_order"]

_ROW_H = 34
_HEADING_H = 24
_MIN_COLUMN_W = 260
_SCOPE_ORDER = {"tenant": 0, "provider": 1, "pair": 2}


def scope_order(level: BucketLevel) -> tuple[int, str, str]:
    """Tenants' buckets first, then providers', then pairs', each by name."""
    return (_SCOPE_ORDER.get(str(level.key.scope), 3), level.key.tenant, level.key.provider)


@dataclass(frozen=True, slots=True)
class GaugeGroup:
    """Gauges under one heading; ``notes`` (by bucket, same order) replace a gauge's token
    text (``12.5/s sent``); ``empty`` is said when there are no levels."""

    heading: str
    levels: tuple[BucketLevel, ...]
    notes: tuple[str, ...] = ()
    empty: str = ""


class BucketGauges(QWidget):
    """Groups of gauges under headings (``set_groups``), or one group without (``set_levels``).
    A gauge: the bucket's name and rate, a bar of tokens / burst coloured as it nears empty,
    and the token count (or the group's note for it). A blocked bucket (a provider said 429)
    is grey."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._groups: list[GaugeGroup] = []
        self._colours: dict[str, QColor] = {}
        self.empty_text = "No rate limits are configured: every bucket is unlimited."
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.setToolTip(
            "Tokens left in each bucket. A send takes one token from every bucket that applies "
            "(its tenant, its provider, and the pair); buckets refill at their rate."
        )

    @property
    def levels(self) -> list[BucketLevel]:
        """Every level shown, group after group."""
        return [level for group in self._groups for level in group.levels]

    @property
    def groups(self) -> list[GaugeGroup]:
        return list(self._groups)

    def set_levels(
        self, levels: Sequence[BucketLevel], colours: Mapping[str, QColor] | None = None
    ) -> None:
        """Show ``levels`` (tenants, then providers, then pairs); ``colours`` (by
        ``str(key)``) mark each bucket like its curve."""
        ordered = tuple(sorted(levels, key=scope_order))
        self.set_groups([GaugeGroup("", ordered)] if ordered else [], colours)

    def set_groups(
        self, groups: Sequence[GaugeGroup], colours: Mapping[str, QColor] | None = None
    ) -> None:
        """Show ``groups`` in order; repainted only when something changed."""
        if colours is not None:
            self._colours = dict(colours)
        groups = list(groups)
        if groups != self._groups:
            resized = self._shape(groups) != self._shape(self._groups)
            self._groups = groups
            if resized:
                self.updateGeometry()
            self.update()

    @staticmethod
    def _shape(groups: Sequence[GaugeGroup]) -> list[tuple[bool, int]]:
        return [(bool(g.heading), len(g.levels)) for g in groups]

    def _columns(self, width: int) -> int:
        return max(1, min(3, width // _MIN_COLUMN_W))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        if not self._groups:
            return _ROW_H + 8
        columns = self._columns(width)
        height = 8
        for group in self._groups:
            height += _HEADING_H if group.heading else 0
            height += math.ceil(max(1, len(group.levels)) / columns) * _ROW_H
        return height

    def sizeHint(self) -> QSize:
        return QSize(2 * _MIN_COLUMN_W, self.heightForWidth(2 * _MIN_COLUMN_W))

    def minimumSizeHint(self) -> QSize:
        return QSize(_MIN_COLUMN_W, self.heightForWidth(max(self.width(), _MIN_COLUMN_W)))

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        muted = palette.color(QPalette.ColorRole.PlaceholderText)
        if not self._groups:
            painter.setPen(muted)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.empty_text)
            return
        columns = self._columns(self.width())
        column_w = self.width() / columns
        top = 4.0
        for group in self._groups:
            if group.heading:
                self._paint_heading(painter, QRectF(4, top, self.width() - 8, _HEADING_H), group)
                top += _HEADING_H
            if not group.levels:
                painter.setPen(muted)
                painter.drawText(
                    QRectF(8, top, self.width() - 16, _ROW_H - 6),
                    Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                    group.empty,
                )
                top += _ROW_H
                continue
            metrics = QFontMetrics(self.font())
            for index, level in enumerate(group.levels):
                row, column = divmod(index, columns)
                cell = QRectF(column * column_w + 4, top + row * _ROW_H, column_w - 12, _ROW_H - 6)
                note = group.notes[index] if index < len(group.notes) else ""
                self._paint_gauge(painter, cell, level, palette, note, metrics)
            top += math.ceil(len(group.levels) / columns) * _ROW_H
        painter.end()

    def _paint_heading(self, painter: QPainter, rect: QRectF, group: GaugeGroup) -> None:
        font = QFont(self.font())
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(self.palette().color(QPalette.ColorRole.WindowText))
        text = QFontMetrics(font).elidedText(
            group.heading, Qt.TextElideMode.ElideRight, int(rect.width())
        )
        painter.drawText(rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom, text)
        painter.setFont(self.font())

    def _paint_gauge(
        self,
        painter: QPainter,
        cell: QRectF,
        level: BucketLevel,
        palette: QPalette,
        note: str,
        metrics: QFontMetrics,
    ) -> None:
        text_h = metrics.height()
        text = palette.color(QPalette.ColorRole.WindowText)
        muted = palette.color(QPalette.ColorRole.PlaceholderText)
        blocked = level.blocked_for_s > 0
        right = (
            f"blocked {fmt_duration(level.blocked_for_s)}"
            if blocked
            else f"{level.tokens:.0f} / {level.burst:g}  ·  {note or fmt_rate(level.rate_per_s)}"
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
