"""The cyclic garbage collector paused while a large load builds its values.

Loading the configuration of 100,000 tenants makes about a million objects that live as long
as the engine. Each collection of the oldest generation walks every object tracked; while
they pile up, Python runs one each time they grew by a quarter, walking them again and again:
0.9 s of an engine's 2.1-2.5 s opening there (measured by opening with the collector off).
None of them is garbage, so pausing the collector meanwhile frees nothing later, and
reference counting still frees everything that is not a cycle.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside (if the collector ran before, it runs again after)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
