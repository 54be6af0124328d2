"""``collector_paused``: no automatic collection inside, the collector as it was after."""

from __future__ import annotations

import gc

import pytest

from engine.core.collector import collector_paused


def test_the_collector_is_paused_inside_and_runs_again_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_off_before_stays_off_and_an_error_resumes_it() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a load that failed")
    assert gc.isenabled()
