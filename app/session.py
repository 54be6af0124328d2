"""What both front ends, the CLI and the console, need for a run: where the store is, who the
audit log names, and stopping cleanly on Ctrl+C or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.paths import Paths
from engine import ConfigError, SecretBox

__all__ = ["Context", "actor", "on_signals", "store_url"]

_ACTOR_MAX = 100  # the audit log's actor column


@dataclass(frozen=True, slots=True)
class Context:
    """The run's data directory, the store it opens and the keys to its secrets."""

    paths: Paths
    db_url: str
    box: SecretBox


def actor(front: str) -> str:
    """Who the audit log names for changes made here: ``cli:user@host``, ``console:...``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{front}:{user}@{socket.gethostname()}"[:_ACTOR_MAX]


def store_url(flag: str | None, paths: Paths, saved: str | None = None) -> str:
    """The store to open: ``--db``, else ``OMNIPOST_DB``, else the console's ``saved`` one,
    else the SQLite file in the data directory (whose folder is created). Raises ConfigError
    when a named SQLite store's folder does not exist."""
    url = flag or os.environ.get("OMNIPOST_DB")
    if url:
        if url.startswith("sqlite:///"):
            folder = Path(url.removeprefix("sqlite:///")).expanduser().parent
            if not folder.is_dir():
                raise ConfigError(f"the folder of the SQLite store does not exist: {folder}.")
        return url
    if saved:
        return saved
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    return paths.default_db_url


@contextlib.contextmanager
def on_signals(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` on SIGINT and SIGTERM while inside, where the running loop can
    (not on Windows' loops, nor outside the main thread)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, callback)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
