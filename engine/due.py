"""The dispatcher's view of the keys with due work, between its looks at the store."""

from __future__ import annotations

from collections.abc import Mapping

from engine.store import DueKey

__all__ = ["count_in"]

Key = tuple[int, int]  # (tenant id, provider id)


def count_in(due: dict[Key, DueKey], added: Mapping[Key, int], now: float) -> bool:
    """Add ``added[key]`` rows due at ``now`` to each key's count in ``due``; returns whether a
    key that had no due rows now has some (the dispatcher's sorted list of keys is then stale).
    Counts over ``DUE_CAP`` are kept: the dispatcher only needs to know there is at least a
    batch."""
    new = False
    for key, n in added.items():
        if n <= 0:
            continue
        known = due.get(key)
        if known is None or known.due <= 0:
            new = True
        if known is None:
            due[key] = DueKey(key[0], key[1], n, now)
        else:
            due[key] = DueKey(key[0], key[1], known.due + n, min(known.next_available_at, now))
    return new
