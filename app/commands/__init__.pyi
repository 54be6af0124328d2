"""The commands' modules, each imported on first use (see ``__init__.py``)."""

from . import api_keys, configure, keys, plan, queue, retention, run, stats, suppression, webhook
from .base import open_engine

__all__ = [
    "api_keys",
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
