"""The asyncio loop the console runs on: qasync's ``QEventLoop``.

PySide6-Essentials 6.12.0 on Python 3.11 releases a reference to ``None``/``True`` on every
signal emit and every Python slot call, until the interpreter aborts ("deallocating None");
pyproject.toml therefore asks for PySide6 below 6.12, and ``tests/ui/test_ui_pure.py`` emits
enough signals to catch that bug should a release with it be installed.
"""

from __future__ import annotations

import sys
from typing import Any

import qasync
from PySide6.QtCore import QMessageLogContext, QtMsgType, qFormatLogMessage, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

__all__ = ["hush_offscreen_noise", "new_event_loop"]


def new_event_loop(app: QApplication) -> Any:
    """A ``qasync.QEventLoop`` on ``app``."""
    return qasync.QEventLoop(app)


_NOISE = "This plugin does not support"  # offscreen: propagateSizeHints(), raise(), ...


def _message(kind: QtMsgType, context: QMessageLogContext, text: str) -> None:
    if not text.startswith(_NOISE):
        sys.stderr.write(qFormatLogMessage(kind, context, text) + "\n")


def hush_offscreen_noise() -> None:
    """Drop the offscreen platform's "This plugin does not support ..." warnings, which say
    nothing about OmniPost; every other Qt message still goes to stderr."""
    qInstallMessageHandler(_message)
