"""``loaded_frozen``: what the process holds on entering is out of the collector's rounds
inside (``gc.freeze``), and in them again after, so that a process opening many engines (these
tests) still collects their cycles."""

from __future__ import annotations

import gc

from app.wiring import loaded_frozen


def test_what_is_held_on_entering_is_frozen_inside_and_not_after() -> None:
    held = [object() for _ in range(10)]
    with loaded_frozen():
        assert gc.get_freeze_count() >= len(held)
    assert gc.get_freeze_count() == 0
