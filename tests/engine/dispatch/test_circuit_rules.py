"""The circuit breaker's rules (engine/core/circuit.py) as tables, at fixed instants, and the
circuit options every provider kind takes."""

from __future__ import annotations

import pytest

from engine import BUILTIN_KINDS, CircuitState, ConfigError, ProviderConfig, SendResult
from engine.core.circuit import (
    CircuitRecord,
    CircuitSettings,
    closed,
    on_failure,
    on_probe_failed,
    on_resume,
    probe_due,
    release_probe,
    take_probe,
)
from engine.providers.schema import circuit_settings

S = CircuitSettings(failures=3, backoff_s=5.0, backoff_max_s=60.0)
CLOSED, OPEN, HALF = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN


@pytest.mark.parametrize(
    ("trips", "wait_s"),
    [(0, 5.0), (1, 5.0), (2, 10.0), (3, 20.0), (4, 40.0), (5, 60.0), (50, 60.0), (10**6, 60.0)],
)
def test_the_backoff_doubles_up_to_its_cap(trips: int, wait_s: float) -> None:
    assert S.backoff(trips) == wait_s


@pytest.mark.parametrize(
    ("run", "state", "next_probe_at"),
    [(1, CLOSED, None), (2, CLOSED, None), (3, OPEN, 105.0), (7, OPEN, 105.0)],
)
def test_a_closed_circuit_opens_at_the_threshold(
    run: int, state: CircuitState, next_probe_at: float | None
) -> None:
    h = on_failure(closed("mail"), run, now=100.0, error="refused", settings=S)
    assert (h.state, h.view.next_probe_at) == (state, next_probe_at)
    if state is OPEN:
        assert (h.view.since, h.view.last_error, h.view.failures, h.trips) == (
            100.0,
            "refused",
            run,
            1,
        )


def test_an_open_circuit_is_not_opened_again_by_more_failures() -> None:
    opened = on_failure(closed("mail"), 3, now=100.0, error="refused", settings=S)
    assert on_failure(opened, 9, now=101.0, error="again", settings=S) is opened


def _open(now: float = 100.0) -> CircuitRecord:
    return on_failure(closed("mail"), 3, now=now, error="refused", settings=S)


@pytest.mark.parametrize(
    ("now", "due"),
    [(99.0, False), (104.999, False), (105.0, True), (500.0, True)],
)
def test_the_probe_is_due_once_the_backoff_is_over(now: float, due: bool) -> None:
    assert probe_due(_open(), now) is due
    assert (take_probe(_open(), "w1", now=now, lease_s=30.0) is not None) is due


def test_one_worker_takes_the_probe_until_its_lease_runs_out() -> None:
    half = take_probe(_open(), "w1", now=105.0, lease_s=30.0)
    assert half is not None
    assert (half.state, half.probe_owner, half.probe_expires_at) == (HALF, "w1", 135.0)
    # Rows: (instant, whether another worker may take it)
    for now, due in [(105.0, False), (134.9, False), (135.0, True), (200.0, True)]:
        assert probe_due(half, now) is due
    taken_over = take_probe(half, "w2", now=135.0, lease_s=30.0)
    assert taken_over is not None and taken_over.probe_owner == "w2"


def test_a_closed_circuit_has_no_probe() -> None:
    assert not probe_due(closed("mail"), 1e12)
    assert take_probe(closed("mail"), "w1", now=1e12, lease_s=1.0) is None


def test_failed_probes_reopen_for_twice_as_long_and_keep_the_outage_start() -> None:
    h = _open()
    rows = [(105.0, 115.0, 2), (115.0, 135.0, 3), (135.0, 175.0, 4), (175.0, 235.0, 5)]
    for now, next_probe_at, trips in rows:
        half = take_probe(h, "w1", now=now, lease_s=30.0)
        assert half is not None
        h = on_probe_failed(half, now=now, error="still down", settings=S)
        assert (h.state, h.view.next_probe_at, h.trips) == (OPEN, next_probe_at, trips)
        assert (h.view.since, h.probe_owner) == (100.0, None)
    assert h.view.failures == 3 + len(rows)


def test_a_probe_given_back_unused_leaves_it_open_and_due() -> None:
    half = take_probe(_open(), "w1", now=110.0, lease_s=30.0)
    assert half is not None
    back = release_probe(half)
    assert (back.state, back.probe_owner, back.trips) == (OPEN, None, 1)
    assert probe_due(back, 110.0)


def test_resuming_closes_and_forgets_the_run_but_keeps_the_last_error() -> None:
    for h in (_open(), take_probe(_open(), "w1", now=105.0, lease_s=30.0)):
        assert h is not None
        back = on_resume(h, now=120.0)
        assert (back.state, back.view.since, back.view.failures, back.trips) == (
            CLOSED,
            120.0,
            0,
            0,
        )
        assert (back.view.next_probe_at, back.probe_owner, back.view.last_error) == (
            None,
            None,
            "refused",
        )


@pytest.mark.parametrize(
    ("result", "counts"),
    [
        (SendResult.unavailable("connection refused"), True),
        (SendResult.transient("HTTP 503", provider_fault=True), True),
        (SendResult.transient("SMTP 450 mailbox busy"), False),
        (SendResult.permanent("SMTP 550 no such user"), False),
        (SendResult.throttled(1.0), False),
        (SendResult.delivered(), False),
    ],
)
def test_which_results_count_toward_the_breaker(result: SendResult, counts: bool) -> None:
    assert result.is_provider_fault is counts


# -- the options ---------------------------------------------------------------------------


def _circuit(**options: str) -> CircuitSettings:
    return circuit_settings(ProviderConfig("p", "simulated", options))


def test_circuit_options_have_defaults_and_are_read() -> None:
    assert _circuit() == CircuitSettings(3, 5.0, 300.0)
    got = _circuit(circuit_failures="5", circuit_backoff_s="2", circuit_backoff_max_s="30")
    assert got == CircuitSettings(5, 2.0, 30.0)
    # A first back-off above the default cap raises the cap with it.
    assert _circuit(circuit_backoff_s="600") == CircuitSettings(3, 600.0, 600.0)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"circuit_failures": "0"}, "'circuit_failures' must be a whole number from 1 to 1000"),
        ({"circuit_failures": "x"}, "'circuit_failures' must be a whole number"),
        ({"circuit_backoff_s": "0"}, "'circuit_backoff_s' must be a number above 0"),
        ({"circuit_backoff_s": "nan"}, "'circuit_backoff_s' must be a number above 0"),
        (
            {"circuit_backoff_s": "10", "circuit_backoff_max_s": "5"},
            "'circuit_backoff_max_s' must not be below circuit_backoff_s",
        ),
    ],
)
def test_bad_circuit_options_are_one_sentence(options: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        _circuit(**options)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("simulated", {}),
        ("file", {"path": "/tmp/omnipost-test-out.jsonl"}),
        ("webhook", {"url": "https://example.com/hook"}),
        ("smtp", {"host": "mx.example.com", "from": "me@example.com"}),
    ],
)
def test_every_kind_takes_and_checks_the_circuit_options(
    kind: str, options: dict[str, str]
) -> None:
    good = {**options, "circuit_failures": "2", "circuit_backoff_s": "1"}
    BUILTIN_KINDS[kind](ProviderConfig("p", kind, good))
    bad = {**options, "circuit_failures": "-1"}
    with pytest.raises(ConfigError, match="circuit_failures"):
        BUILTIN_KINDS[kind](ProviderConfig("p", kind, bad))
