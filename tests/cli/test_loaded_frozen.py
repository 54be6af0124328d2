"""``loaded_frozen``: in the program's own process (``omnipost`` froze its modules as they
loaded), what the process holds once its engine opened is frozen out of the collector's rounds;
a caller that runs a command in its own process (these tests) keeps its collector as it was."""

from __future__ import annotations

import gc
import subprocess
import sys

from app.wiring import RARE_COLLECTIONS, loaded_frozen

_OWN = """
import gc
from app.wiring import loaded_frozen
gc.freeze()  # as app.cli does once a command's modules loaded
before = gc.get_freeze_count()
held = [[i] for i in range(50_000)]
with loaded_frozen():
    inside = gc.get_freeze_count()
    plain = gc.get_threshold()
with loaded_frozen(collect_rarely=True):
    rarely = gc.get_threshold()
print(inside - before >= 50_000, gc.isenabled(), plain == gc.get_threshold())
print(*rarely, *gc.get_threshold())
"""


def test_a_caller_that_runs_commands_in_its_own_process_keeps_its_collector() -> None:
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    with loaded_frozen(collect_rarely=True):
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == thresholds
    assert gc.isenabled()


def test_in_the_programs_own_process_what_it_holds_is_frozen() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OWN], capture_output=True, text=True, timeout=60, check=True
    )
    frozen, rarely_then_after = done.stdout.splitlines()
    assert frozen.split() == ["True", "True", "True"], done.stderr
    # A worker's collector runs rarely while it dispatches, and as it was after.
    numbers = [int(n) for n in rarely_then_after.split()]
    assert tuple(numbers[:3]) == RARE_COLLECTIONS
    assert tuple(numbers[3:]) == gc.get_threshold()
