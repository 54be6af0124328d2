"""OmniPost's operator console: PySide6 widgets over the engine, on the qasync event loop.

The composition root (``app.console``) builds a ``Bridge`` around an open ``Engine`` and shows
a ``MainWindow`` on it; the views talk to the bridge only, never to the engine.
"""

from ui.bridge import Bridge
from ui.loop import hush_offscreen_noise, new_event_loop
from ui.main_window import MainWindow
from ui.settings import ConsoleSettings, load_settings, save_settings
from ui.theme import apply_theme

__all__ = [
    "Bridge",
    "ConsoleSettings",
    "MainWindow",
    "apply_theme",
    "hush_offscreen_noise",
    "load_settings",
    "new_event_loop",
    "save_settings",
]
