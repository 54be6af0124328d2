"""``omnipost console`` on a Linux desktop whose X11 libraries are missing: one sentence naming
the packages, exit 1, instead of Qt's own abort (``app/screen.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from app.screen import DEBIAN_PACKAGES, FEDORA_PACKAGES, LIBRARIES, xcb_problem
from testkit.cli import assert_one_sentence, clean_env, run_process

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="Qt's xcb plugin is Linux's"
)


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """A platform plugin folder holding a ``libqxcb.so`` (its content is the loader's
    business: the tests below answer for the loader)."""
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "libqxcb.so").write_bytes(b"not a shared object")
    return folder


def loader(*missing: str, plugin_fails: bool = True) -> Callable[[str], str | None]:
    """A stand-in for ``dlopen``: the sonames in ``missing`` and, with ``plugin_fails``, the
    plugin itself do not load; the reason names the first missing library, as ld.so does."""

    def loads(library: str) -> str | None:
        if library in missing:
            return f"{library}: cannot open shared object file: No such file or directory"
        if library.endswith("libqxcb.so") and plugin_fails:
            first = missing[0] if missing else "libsomething.so.9"
            return f"{first}: cannot open shared object file: No such file or directory"
        return None

    return loads


def x_desktop(plugins: Path, **more: str) -> dict[str, str]:
    return {"DISPLAY": ":0", "QT_QPA_PLATFORM_PLUGIN_PATH": str(plugins), **more}


def test_missing_libraries_are_named_with_their_packages(plugins: Path) -> None:
    said = xcb_problem(x_desktop(plugins), loader("libxcb-icccm.so.4", "libxcb-keysyms.so.1"))
    assert said is not None
    assert "needs libxcb-icccm.so.4 and libxcb-keysyms.so.1, missing here" in said
    assert "`sudo apt-get install libxcb-icccm4 libxcb-keysyms1` (Debian, Ubuntu)" in said
    assert "`sudo dnf install xcb-util-wm xcb-util-keysyms` (Fedora)" in said
    assert_one_sentence(f"omnipost: {said}")


def test_every_library_missing_still_fits_one_line(plugins: Path) -> None:
    said = xcb_problem(x_desktop(plugins), loader(*LIBRARIES))
    assert said is not None
    for package in (*DEBIAN_PACKAGES, *FEDORA_PACKAGES):
        assert package in said
    assert said.endswith("(Fedora).")


def test_the_cursor_library_is_checked_though_nothing_links_it(plugins: Path) -> None:
    said = xcb_problem(x_desktop(plugins), loader("libxcb-cursor.so.0", plugin_fails=False))
    assert said is not None and "libxcb-cursor0" in said and "xcb-util-cursor" in said


def test_a_plugin_that_fails_otherwise_is_said_in_the_loaders_words(plugins: Path) -> None:
    said = xcb_problem(x_desktop(plugins), loader())
    assert said is not None
    assert "does not load (libsomething.so.9: cannot open shared object file" in said


@pytest.mark.parametrize(
    "env",
    [
        {"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"},  # another platform chosen
        {"QT_QPA_PLATFORM": "wayland"},
        {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", "DISPLAY": ":0"},
        {},  # no screen at all: the CLI says that first
    ],
)
def test_nothing_is_checked_when_qt_would_not_use_xcb(plugins: Path, env: dict[str, str]) -> None:
    assert xcb_problem({"QT_QPA_PLATFORM_PLUGIN_PATH": str(plugins), **env}, loader()) is None


def test_xcb_chosen_by_name_is_checked(plugins: Path) -> None:
    env = {"QT_QPA_PLATFORM": "xcb:nograb", "QT_QPA_PLATFORM_PLUGIN_PATH": str(plugins)}
    assert xcb_problem(env, loader("libxcb-xkb.so.1")) is not None
    assert xcb_problem(env, loader(plugin_fails=False)) is None


@pytest.mark.slow
def test_the_console_says_it_in_one_sentence_and_exits_1(plugins: Path, tmp_path: Path) -> None:
    """The real CLI and the real loader, on a plugin that cannot load."""
    env = clean_env(tmp_path, DISPLAY=":987", QT_QPA_PLATFORM_PLUGIN_PATH=str(plugins))
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("WAYLAND_DISPLAY", None)
    done = run_process(["console"], env)
    assert done.code == 1, done.err
    assert_one_sentence(done.err)
    assert "the console cannot open a window: Qt's X11" in done.err
