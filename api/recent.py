"""``Recent``: values read from the store, each kept for a while, and read once however many
requests want it at the same time.

Without the second half, every request that arrives while a kept value is being read again
(under load, all those in flight) reads it too: with 32 callers of one key, 32 reads of the key
and 32 counts of the tenant's queue a second, where one of each does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["Recent"]

_KEPT = 65_536  # entries kept before they are all dropped
V = TypeVar("V")


def _always(value: object) -> bool:
    return True


class Recent(Generic[V]):
    """``await recent.get(name, read)``: the value ``read()`` gave for ``name`` at most
    ``ttl_s`` ago; else ``read()`` again, once for all who ask meanwhile (they share its value
    or its exception). A value for which ``keep`` is false is handed out but not kept."""

    def __init__(self, ttl_s: float, *, keep: Callable[[V], bool] = _always) -> None:
        self.ttl_s = ttl_s
        self.keep = keep
        self._kept: dict[str, tuple[float, V]] = {}
        self._reading: dict[str, asyncio.Future[V]] = {}

    async def get(self, name: str, read: Callable[[], Awaitable[V]]) -> V:
        kept = self._kept.get(name)
        if kept is not None and time.monotonic() - kept[0] < self.ttl_s:
            return kept[1]
        reading = self._reading.get(name)
        if reading is None:
            reading = self._reading[name] = asyncio.ensure_future(self._read(name, read))
        # One caller going away (its client hung up) leaves the read to the others.
        return await asyncio.shield(reading)

    def peek(self, name: str) -> V | None:
        """The kept value of ``name``, however old, without reading it."""
        kept = self._kept.get(name)
        return None if kept is None else kept[1]

    async def _read(self, name: str, read: Callable[[], Awaitable[V]]) -> V:
        at = time.monotonic()
        try:
            value = await read()
        finally:
            del self._reading[name]
        if not self.keep(value):
            self._kept.pop(name, None)
        else:
            if len(self._kept) >= _KEPT:
                self._kept.clear()
            self._kept[name] = (at, value)
        return value

    def __len__(self) -> int:
        return len(self._kept)

    def __repr__(self) -> str:
        return f"Recent(ttl_s={self.ttl_s}, kept={len(self._kept)}, reading={len(self._reading)})"
