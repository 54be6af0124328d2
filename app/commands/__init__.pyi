"""The commands' modules, each imported on first use (see ``__init__.py``)."""

from . import apikeys, configure, keys, plan, queue, retention, run, stats, suppression, webhook
from .base import open_engine

__all__ = [
    "apikeys",
    "configure",
    "keys",
    "open_engine",
    "plan",
    "queue",
    "retention",
    "run",
    "stats",
    "suppression",
    "webhook",
]
