"""Before the console starts on Linux: whether Qt can reach a screen, in one sentence if not.

Qt aborts with a long message of its own (and a hint to reinstall the application) when its
``xcb`` platform plugin cannot load because a system library is missing, which is the usual
state of a fresh desktop or container: the X11 client libraries Qt links against are not
installed with PySide6's wheel. ``xcb_problem`` loads the plugin as Qt would (``dlopen``, which
names the first library it cannot find) before Qt does, so the CLI can name the packages
instead. Nothing here imports Qt at module level: the CLI imports this without PySide6.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["DEBIAN_PACKAGES", "FEDORA_PACKAGES", "LIBRARIES", "no_screen", "xcb_problem"]

# What Qt 6's xcb plugin loads (linked, and libxcb-cursor opened when it starts, since Qt 6.5):
# each library's soname and the packages that hold it, Debian's and Ubuntu's, then Fedora's.
LIBRARIES = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
}
DEBIAN_PACKAGES = tuple(dict.fromkeys(debian for debian, _ in LIBRARIES.values()))
FEDORA_PACKAGES = tuple(dict.fromkeys(fedora for _, fedora in LIBRARIES.values()))
_CURSOR = "libxcb-cursor.so.0"  # not linked: the plugin opens it when it starts


def _loads(library: str) -> str | None:
    """None when ``library`` (a path or a soname) loads, else the loader's reason."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        return str(exc)
    return None


def no_screen(env: Mapping[str, str]) -> bool:
    """On Linux without X or Wayland (and no platform chosen), Qt would abort: say so first."""
    if not sys.platform.startswith("linux") or env.get("QT_QPA_PLATFORM"):
        return False
    return not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def _uses_xcb(env: Mapping[str, str]) -> bool:
    """Whether Qt would load its xcb plugin: chosen by name, or the default on an X display
    outside a Wayland session."""
    if not sys.platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    wayland = env.get("XDG_SESSION_TYPE") == "wayland" and bool(env.get("WAYLAND_DISPLAY"))
    return bool(env.get("DISPLAY")) and not wayland


def _plugin_folder(env: Mapping[str, str]) -> Path:
    """Where Qt looks for its platform plugins: ``QT_QPA_PLATFORM_PLUGIN_PATH`` first, as Qt
    does, else the plugins folder of the PySide6 in use (inside the packaged app too)."""
    chosen = env.get("QT_QPA_PLATFORM_PLUGIN_PATH")
    if chosen:
        return Path(chosen)
    from PySide6.QtCore import QLibraryInfo  # QtCore needs no screen

    return Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"


def xcb_problem(env: Mapping[str, str], loads: Callable[[str], str | None] = _loads) -> str | None:
    """The one sentence to print when Qt's xcb platform plugin would not load (naming the
    packages that hold the libraries missing), or None when it loads or is not the one Qt
    would use. ``loads`` tries a library as ``dlopen`` does (tests pass their own)."""
    if not _uses_xcb(env):
        return None
    plugin = _plugin_folder(env) / "libqxcb.so"
    failed = _loads_all(plugin, loads)
    if failed is None:
        return None
    missing = [name for name in LIBRARIES if loads(name) is not None]
    if not missing:  # something else: the loader's own words
        return (
            f"the console cannot open a window: Qt's X11 (xcb) platform plugin does not load"
            f" ({failed}); reinstall OmniPost, or set QT_QPA_PLATFORM to another platform."
        )
    debian = " ".join(dict.fromkeys(LIBRARIES[name][0] for name in missing))
    fedora = " ".join(dict.fromkeys(LIBRARIES[name][1] for name in missing))
    return (
        f"the console cannot open a window: Qt's X11 platform plugin needs"
        f" {' and '.join(missing)}, missing here; install them with"
        f" `sudo apt-get install {debian}` (Debian, Ubuntu) or `sudo dnf install {fedora}`"
        " (Fedora)."
    )


def _loads_all(plugin: Path, loads: Callable[[str], str | None]) -> str | None:
    """Why ``plugin`` (or the cursor library it opens when it starts) does not load, or None."""
    if not plugin.is_file():
        return f"{plugin} is not there"
    return loads(str(plugin)) or loads(_CURSOR)
