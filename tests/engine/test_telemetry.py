"""Telemetry: nearest-rank percentiles, per-second rates over a stepped clock, totals."""

from __future__ import annotations

import pytest

from engine.core.clock import FakeClock
from engine.core.domain import Outcome
from engine.telemetry.figures import Counters, Telemetry, percentile

ONE_TO_TEN = [float(i) for i in range(1, 11)]
ONE_TO_HUNDRED = [float(i) for i in range(1, 101)]

# (ascending values, q, nearest-rank percentile)
PERCENTILES: list[tuple[list[float], float, float | None]] = [
    ([], 50, None),
    ([], 0, None),
    ([7.0], 0, 7.0),
    ([7.0], 50, 7.0),
    ([7.0], 100, 7.0),
    ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 25, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 26, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
    ([1.0, 2.0, 3.0, 4.0], 99, 4.0),
    ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
    (ONE_TO_TEN, 90, 9.0),
    (ONE_TO_TEN, 91, 10.0),
    (ONE_TO_HUNDRED, 50, 50.0),
    (ONE_TO_HUNDRED, 95, 95.0),
    (ONE_TO_HUNDRED, 99, 99.0),
    (ONE_TO_HUNDRED, 99.5, 100.0),
    ([0.5, 0.5, 0.5, 9.0], 75, 0.5),
]


@pytest.mark.parametrize(("values", "q", "expected"), PERCENTILES)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


Record = tuple[Outcome, bool]  # (outcome, dead)
D: Record = (Outcome.DELIVERED, False)
THR: Record = (Outcome.THROTTLED, False)
FAIL: Record = (Outcome.TRANSIENT, False)
DEAD: Record = (Outcome.PERMANENT, True)

# (seconds to step the clock, records made then, delivered/s, throttled/s, failed/s after):
# a rate is the mean over the last five whole seconds, the current second not counted.
RATE_STEPS: list[tuple[float, list[Record], float, float, float]] = [
    (0.0, [D] * 10 + [THR] * 5, 0.0, 0.0, 0.0),  # t=1000.0: still the current second
    (0.5, [D] * 5, 0.0, 0.0, 0.0),  # t=1000.5: the same second
    (0.5, [FAIL, DEAD], 3.0, 1.0, 0.0),  # t=1001: second 1000 is complete: 15/5, 5/5
    (1.0, [D] * 20, 3.0, 1.0, 0.4),  # t=1002: seconds 1000 and 1001
    (1.0, [], 7.0, 1.0, 0.4),  # t=1003
    (2.0, [], 7.0, 1.0, 0.4),  # t=1005: second 1000 is the oldest in the window
    (1.0, [], 4.0, 0.0, 0.4),  # t=1006: second 1000 has left the window
    (1.0, [], 4.0, 0.0, 0.0),  # t=1007: 1001 too
    (1.0, [], 0.0, 0.0, 0.0),  # t=1008: nothing recent
    (100.0, [D] * 3, 0.0, 0.0, 0.0),  # a long gap
    (1.0, [], 0.6, 0.0, 0.0),
]


def test_rates_over_a_stepped_clock() -> None:
    clock = FakeClock(start=1_000.0)
    telemetry = Telemetry(clock)
    for step, (advance_s, records, delivered, throttled, failed) in enumerate(RATE_STEPS):
        clock.advance(advance_s)
        for outcome, dead in records:
            telemetry.record(outcome, dead=dead)
        got = (
            telemetry.rate_per_s(Outcome.DELIVERED),
            telemetry.rate_per_s(Outcome.THROTTLED),
            telemetry.rate_per_s(Outcome.TRANSIENT, Outcome.PERMANENT),
        )
        assert got == pytest.approx((delivered, throttled, failed)), f"step {step} at {clock}"


def test_rate_of_no_outcome_is_zero() -> None:
    telemetry = Telemetry(FakeClock())
    telemetry.record(Outcome.DELIVERED)
    assert telemetry.rate_per_s() == 0.0


def test_totals_count_every_outcome() -> None:
    telemetry = Telemetry(FakeClock())
    rows: list[tuple[Outcome, bool]] = [
        (Outcome.DELIVERED, False),
        (Outcome.DELIVERED, False),
        (Outcome.THROTTLED, False),
        (Outcome.TRANSIENT, False),
        (Outcome.TRANSIENT, True),
        (Outcome.PERMANENT, True),
    ]
    for outcome, dead in rows:
        telemetry.record(outcome, dead=dead)
    telemetry.count("takeovers", 3)
    telemetry.count("reaped")
    expected = Counters(delivered=2, throttled=1, failed=1, dead=2, takeovers=3, reaped=1)
    assert telemetry.totals() == expected
    assert repr(telemetry) == f"Telemetry({expected})"


def test_latency_percentiles_of_recent_deliveries() -> None:
    telemetry = Telemetry(FakeClock(), latency_window=100)
    assert telemetry.latency_percentiles() == (None, None, None)
    for latency_s in reversed(range(1, 201)):  # only the last 100 are kept: 100 down to 1
        telemetry.record(Outcome.DELIVERED, latency_s=float(latency_s))
    telemetry.record(Outcome.DELIVERED)  # no latency known: not counted
    telemetry.record(Outcome.TRANSIENT, latency_s=1_000.0)  # not a delivery: not counted
    assert telemetry.latency_percentiles() == (50.0, 95.0, 99.0)
