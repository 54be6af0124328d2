"""Write ``icon.png`` and ``omnipost.ico`` beside this file from the console's own icon.

The console draws its icon in code (``ui.theme.app_icon``); the packaged executable needs it as
files (PyInstaller's ``icon=`` on Windows and macOS, a desktop entry on Linux). Run this again
after changing the drawing: ``QT_QPA_PLATFORM=offscreen .venv/bin/python resources/make_icons.py``.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice, QSize
from PySide6.QtGui import QGuiApplication, QIcon

HERE = Path(__file__).resolve().parent
SIZES = (16, 32, 64, 128)


def _png(icon: QIcon, size: int) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    icon.pixmap(QSize(size, size)).save(buffer, "PNG")
    return bytes(buffer.data().data())


def ico(images: dict[int, bytes]) -> bytes:
    """An ICO file holding each PNG of ``images`` (size in pixels -> PNG bytes)."""
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = len(header) + 16 * len(images)
    entries, blobs = b"", b""
    for size, data in sorted(images.items()):
        side = size % 256  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset)
        blobs += data
        offset += len(data)
    return header + entries + blobs


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    from ui.theme import app_icon

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # QPixmap needs one
    icon = app_icon()
    images = {size: _png(icon, size) for size in SIZES}
    (HERE / "icon.png").write_bytes(images[max(SIZES)])
    (HERE / "omnipost.ico").write_bytes(ico(images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
