"""engine.limits.envelope: the rate envelope over timestamps, as tables at fixed instants."""

from __future__ import annotations

import random

import pytest

from engine.limits.envelope import (
    Window,
    envelope_bound,
    max_in_window,
    min_in_window,
    worst_span,
    worst_window,
)

# (window_s, rate_per_s, burst, edges, lag_s, bound)
BOUNDS = [
    (1.0, 10.0, 5.0, 1.0, 0.0, 16.0),  # burst + rate * W + 1
    (0.5, 10.0, 5.0, 0.0, 0.0, 10.0),  # tokens counted exactly
    (0.5, 10.0, 5.0, 4.0, 0.0, 14.0),  # one edge per worker
    (0.5, 10.0, 5.0, 1.0, 0.1, 12.0),  # recorded times that trail the take
    (0.0, 10.0, 5.0, 0.0, 0.0, 5.0),  # an instant: the burst
]


@pytest.mark.parametrize(("window_s", "rate_per_s", "burst", "edges", "lag_s", "bound"), BOUNDS)
def test_envelope_bound(
    window_s: float, rate_per_s: float, burst: float, edges: float, lag_s: float, bound: float
) -> None:
    got = envelope_bound(window_s, rate_per_s, burst, edges=edges, lag_s=lag_s)
    assert got == pytest.approx(bound)


# (count, allowed, holds)
HOLDS = [
    (0, 0.0, True),
    (16, 16.0, True),  # on the bound
    (16, 16.0 - 1e-12, True),  # float noise below a whole bound
    (17, 16.0, False),
    (16.5, 16.4, False),  # weighted takes
]


@pytest.mark.parametrize(("count", "allowed", "holds"), HOLDS)
def test_a_window_holds_up_to_its_bound(count: float, allowed: float, holds: bool) -> None:
    assert Window(0.0, 1.0, count, allowed).holds is holds


# (timestamps, window_s, most in one window [t, t + W] starting at a delivery)
MAX_IN_WINDOW = [
    ([], 1.0, 0),
    ([5.0], 1.0, 1),
    ([0.0, 0.5, 1.0], 1.0, 3),  # closed at both ends
    ([0.0, 0.5, 1.0001], 1.0, 2),
    ([3.0, 1.0, 2.0, 1.5], 1.0, 3),  # unsorted input
    ([0.0, 0.0, 0.0, 7.0], 0.1, 3),  # ties
    ([0.0, 10.0, 10.05, 10.1, 30.0], 0.1, 3),  # the busiest window is not the first
    ([-2.0, -1.5, 4.0], 1.0, 2),  # any origin of time
]


@pytest.mark.parametrize(("timestamps", "window_s", "expected"), MAX_IN_WINDOW)
def test_max_in_window(timestamps: list[float], window_s: float, expected: int) -> None:
    assert max_in_window(timestamps, window_s) == expected


@pytest.mark.parametrize("window_s", [0.0, -1.0, float("nan")])
def test_a_window_must_last(window_s: float) -> None:
    for check in (max_in_window, min_in_window):
        with pytest.raises(ValueError, match="window"):
            check([1.0], window_s)
    with pytest.raises(ValueError, match="window"):
        worst_window([1.0], window_s, 10.0, 1.0)


STEADY = [i / 64.0 for i in range(193)]  # 64/s from 0 to 3 s

# (timestamps, window_s, fewest in a window that starts at a delivery and ends by the last)
MIN_IN_WINDOW = [
    ([], 1.0, 0),
    (STEADY, 1.0, 65),
    ([t for t in STEADY if not 1.25 < t < 1.75], 1.0, 65 - 31),  # a stall
    (STEADY[:60], 1.0, 0),  # shorter than one window
]


@pytest.mark.parametrize(("timestamps", "window_s", "expected"), MIN_IN_WINDOW)
def test_min_in_window(timestamps: list[float], window_s: float, expected: int) -> None:
    assert min_in_window(timestamps, window_s) == expected


def paced(rate_per_s: float, burst: int, n: int) -> list[float]:
    """What a perfect bucket admits: ``burst`` at once, then one every 1/rate seconds."""
    return [0.0] * burst + [(i + 1) / rate_per_s for i in range(n - burst)]


ONE_OVER = [*paced(8.0, 4, 40), 0.0625]  # [0, 0.125] holds 4 + 1 + 1
TWO_OVER = [*ONE_OVER, 0.0625]

# (timestamps, window_s, rate_per_s, burst, edges, lag_s, worst window, holds); rates and
# windows exact in binary, so a perfect run lands exactly on its bound.
WORST_WINDOW = [
    ([], 1.0, 8.0, 4.0, 1.0, 0.0, Window(0.0, 1.0, 0, 13.0), True),
    (paced(8.0, 4, 40), 0.125, 8.0, 4.0, 1.0, 0.0, Window(0.0, 0.125, 5, 6.0), True),
    (paced(128.0, 16, 1000), 1.0, 128.0, 16.0, 0.0, 0.0, Window(0.0, 1.0, 144, 144.0), True),
    # one over the exact bound; the +1 edge takes it back
    (ONE_OVER, 0.125, 8.0, 4.0, 0.0, 0.0, Window(0.0, 0.125, 6, 5.0), False),
    (ONE_OVER, 0.125, 8.0, 4.0, 1.0, 0.0, Window(0.0, 0.125, 6, 6.0), True),
    (TWO_OVER, 0.125, 8.0, 4.0, 1.0, 0.0, Window(0.0, 0.125, 7, 6.0), False),
    # late in the run: the window found is the fullest, wherever it starts
    ([0.0, 3.0, 3.0, 3.0, 3.5], 1.0, 1.0, 1.0, 1.0, 0.0, Window(3.0, 1.0, 4, 3.0), False),
    # the lag widens every window by lag_s
    ([0.0, 3.0, 3.0, 3.0, 3.5], 1.0, 1.0, 1.0, 1.0, 1.0, Window(3.0, 1.0, 4, 4.0), True),
    # 4% over 100/s shows only in long windows
    ([i / 104.0 for i in range(600)], 1.0, 100.0, 5.0, 1.0, 0.0, Window(0.0, 1.0, 105, 106), True),
    ([i / 104.0 for i in range(600)], 2.0, 100.0, 5.0, 1.0, 0.0, Window(0.0, 2.0, 209, 206), False),
]


@pytest.mark.parametrize(
    ("timestamps", "window_s", "rate_per_s", "burst", "edges", "lag_s", "expected", "holds"),
    WORST_WINDOW,
)
def test_worst_window(
    timestamps: list[float],
    window_s: float,
    rate_per_s: float,
    burst: float,
    edges: float,
    lag_s: float,
    expected: Window,
    holds: bool,
) -> None:
    worst = worst_window(timestamps, window_s, rate_per_s, burst, edges=edges, lag_s=lag_s)
    assert worst == expected
    assert worst.holds is holds


# (takes as (time, tokens), rate_per_s, burst, worst span, holds); no edge
WORST_SPAN = [
    ([], 2.0, 4.0, Window(0.0, 0.0, 0.0, 4.0), True),
    ([(0.0, 4.0)], 2.0, 4.0, Window(0.0, 0.0, 4.0, 4.0), True),  # the burst at once
    ([(0.0, 5.0)], 2.0, 4.0, Window(0.0, 0.0, 5.0, 4.0), False),
    ([(0.0, 4.0), (1.0, 2.0), (2.0, 2.0)], 2.0, 4.0, Window(0.0, 0.0, 4.0, 4.0), True),
    # a burst refilled too soon: 4 at 0, 4 more half a second later
    ([(0.0, 4.0), (0.5, 4.0)], 2.0, 4.0, Window(0.0, 0.5, 8.0, 5.0), False),
    # the worst span is late and short, and the order of the takes does not matter
    ([(9.0, 3.0), (0.0, 1.0), (9.25, 3.0)], 2.0, 4.0, Window(9.0, 0.25, 6.0, 4.5), False),
    # partial takes count by their tokens
    ([(0.0, 0.5), (0.0, 0.25), (0.125, 0.5)], 2.0, 1.0, Window(0.0, 0.125, 1.25, 1.25), True),
]


@pytest.mark.parametrize(("takes", "rate_per_s", "burst", "expected", "holds"), WORST_SPAN)
def test_worst_span(
    takes: list[tuple[float, float]],
    rate_per_s: float,
    burst: float,
    expected: Window,
    holds: bool,
) -> None:
    worst = worst_span(takes, rate_per_s, burst)
    assert worst == expected
    assert worst.holds is holds


def test_worst_span_agrees_with_trying_every_pair() -> None:
    """On a grid where float arithmetic is exact, the one pass finds the same excess as
    comparing every start with every end."""
    rng = random.Random(11)
    for _ in range(300):
        rate_per_s, burst = rng.choice([0.5, 2.0, 8.0]), rng.choice([1.0, 4.0])
        takes = sorted((rng.randint(0, 40) / 8, rng.randint(0, 8) / 4) for _ in range(20))
        brute = max(
            (
                sum(n for _, n in takes[i : j + 1]) - (burst + rate_per_s * (takes[j][0] - t))
                for i, (t, _) in enumerate(takes)
                for j in range(i, len(takes))
            ),
            default=-burst,
        )
        worst = worst_span(takes, rate_per_s, burst)
        assert worst.count - worst.allowed == max(brute, -burst)


def test_max_in_window_agrees_with_counting_every_window() -> None:
    rng = random.Random(7)
    for _ in range(200):
        ts = [rng.uniform(0.0, 3.0) for _ in range(rng.randint(0, 40))]
        window_s = rng.choice([0.05, 0.1, 0.5, 1.0])
        brute = max((sum(t <= u <= t + window_s for u in ts) for t in ts), default=0)
        assert max_in_window(ts, window_s) == brute
