"""Light and dark palettes that follow the system, colours for plots and gauges, the icon."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QApplication

__all__ = ["SERIES", "Theme", "app_icon", "apply_theme", "fill_colour", "system_is_dark"]

# Tableau 10: tells a dozen series apart on light and dark backgrounds alike.
SERIES = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
OK, WARN, LOW = QColor("#3a9d5d"), QColor("#e0a030"), QColor("#d64545")


@dataclass(frozen=True, slots=True)
class Theme:
    dark: bool
    background: QColor
    panel: QColor
    text: QColor
    muted: QColor
    grid: QColor

    def series(self, index: int) -> QColor:
        return QColor(SERIES[index % len(SERIES)])


LIGHT = Theme(
    False, QColor("#ffffff"), QColor("#f4f5f7"), QColor("#1f2328"), QColor("#6e7781"),
    QColor("#d0d7de"),
)  # fmt: skip
DARK = Theme(
    True, QColor("#1e2127"), QColor("#272b33"), QColor("#e6e6e6"), QColor("#9aa3ad"),
    QColor("#3b414b"),
)  # fmt: skip


def system_is_dark() -> bool:
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def fill_colour(fill: float, blocked: bool = False) -> QColor:
    """Green when a bucket has room, amber below half, red below a fifth; grey when blocked."""
    if blocked:
        return QColor("#8a8f98")
    if fill < 0.2:
        return LOW
    if fill < 0.5:
        return WARN
    return OK


def apply_theme(app: QApplication, dark: bool | None = None) -> Theme:
    """Fusion with a light or dark palette (``None``: as the system says). Returns the theme
    for the plots."""
    theme = DARK if (system_is_dark() if dark is None else dark) else LIGHT
    app.setStyle("Fusion")
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: theme.panel,
        QPalette.ColorRole.Base: theme.background,
        QPalette.ColorRole.AlternateBase: theme.panel,
        QPalette.ColorRole.Button: theme.panel,
        QPalette.ColorRole.Text: theme.text,
        QPalette.ColorRole.WindowText: theme.text,
        QPalette.ColorRole.ButtonText: theme.text,
        QPalette.ColorRole.ToolTipBase: theme.background,
        QPalette.ColorRole.ToolTipText: theme.text,
        QPalette.ColorRole.PlaceholderText: theme.muted,
        QPalette.ColorRole.Highlight: QColor("#4e79a7"),
        QPalette.ColorRole.HighlightedText: QColor("#ffffff"),
        QPalette.ColorRole.Link: QColor("#4e79a7"),
    }
    for role, colour in roles.items():
        palette.setColor(role, colour)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, theme.muted)
    app.setPalette(palette)
    return theme


def app_icon() -> QIcon:
    """A bucket with a level, drawn here so the package needs no resource files."""
    icon = QIcon()
    for size in (16, 32, 64, 128):
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        s = size / 16
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(QColor("#4e79a7")))
        painter.drawRoundedRect(QRectF(1 * s, 1 * s, 14 * s, 14 * s), 3 * s, 3 * s)
        painter.setBrush(QBrush(QColor("#ffffff")))
        painter.drawPolygon(
            [QPointF(4 * s, 4 * s), QPointF(12 * s, 4 * s), QPointF(11 * s, 13 * s),
             QPointF(5 * s, 13 * s)]
        )  # fmt: skip
        painter.setBrush(QBrush(QColor("#59a14f")))
        painter.drawPolygon(
            [QPointF(4.6 * s, 8.5 * s), QPointF(11.4 * s, 8.5 * s), QPointF(11 * s, 13 * s),
             QPointF(5 * s, 13 * s)]
        )  # fmt: skip
        painter.end()
        icon.addPixmap(pixmap)
    return icon
