"""Burst simulation: arrival schedules by pattern, and the predicted drain time."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from engine.core.errors import ConfigError
from engine.planning.simulate import Pattern, predicted_drain_s, schedule


def check_shape(offsets: list[float], count: int, duration_s: float) -> None:
    assert len(offsets) == count
    assert offsets == sorted(offsets), "ascending"
    assert all(0.0 <= t <= duration_s for t in offsets), "within [0, duration]"


@pytest.mark.parametrize("pattern", list(Pattern))
@pytest.mark.parametrize(
    ("count", "duration_s"), [(0, 10.0), (1, 10.0), (7, 3.0), (1_000, 60.0), (50, 0.0)]
)
def test_every_pattern_has_the_right_shape(pattern: Pattern, count: int, duration_s: float) -> None:
    offsets = schedule(pattern, count, duration_s, random.Random(1))
    check_shape(offsets, count, duration_s)
    if count:
        assert offsets[0] == 0.0, "the first arrives at the start"


@pytest.mark.parametrize("pattern", ["spike", "steady", "ramp", "poisson"])
def test_patterns_by_name(pattern: str) -> None:
    by_name = schedule(pattern, 20, 5.0, random.Random(3))
    assert by_name == schedule(Pattern(pattern), 20, 5.0, random.Random(3))


# (pattern, count, duration_s, offsets)
EXACT: list[tuple[Pattern, int, float, list[float]]] = [
    (Pattern.SPIKE, 3, 10.0, [0.0, 0.0, 0.0]),
    (Pattern.STEADY, 4, 2.0, [0.0, 0.5, 1.0, 1.5]),
    (Pattern.STEADY, 1, 2.0, [0.0]),
    (Pattern.RAMP, 4, 4.0, [0.0, 2.0, 4.0 * math.sqrt(0.5), 4.0 * math.sqrt(0.75)]),
    (Pattern.RAMP, 0, 4.0, []),
]


@pytest.mark.parametrize(("pattern", "count", "duration_s", "offsets"), EXACT)
def test_exact_schedules(
    pattern: Pattern, count: int, duration_s: float, offsets: list[float]
) -> None:
    assert schedule(pattern, count, duration_s) == pytest.approx(offsets)


def test_ramp_arrivals_grow_denser() -> None:
    offsets = schedule(Pattern.RAMP, 10_000, 100.0)
    per_decile = [sum(1 for t in offsets if 10 * d <= t < 10 * (d + 1)) for d in range(10)]
    assert per_decile == sorted(per_decile) and len(set(per_decile)) == 10, per_decile
    # A linearly growing rate: the last tenth of the time gets 19 times the first tenth's share.
    assert per_decile[9] / per_decile[0] == pytest.approx(19, rel=0.05)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert gaps[100] > gaps[5_000] > gaps[9_000]


def test_steady_arrivals_are_evenly_spaced() -> None:
    offsets = schedule(Pattern.STEADY, 600, 60.0)
    gaps = {round(b - a, 9) for a, b in itertools.pairwise(offsets)}
    assert gaps == {0.1}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_mean_rate_is_about_count_over_duration(seed: int) -> None:
    count, duration_s = 4_000, 100.0
    offsets = schedule(Pattern.POISSON, count, duration_s, random.Random(seed))
    gaps = [b - a for a, b in itertools.pairwise(offsets) if b < duration_s]
    assert statistics.fmean(gaps) == pytest.approx(duration_s / count, rel=0.1)
    # Exponential gaps: the standard deviation is about the mean (a steady stream has none).
    assert statistics.stdev(gaps) == pytest.approx(duration_s / count, rel=0.15)
    assert offsets[-1] == pytest.approx(duration_s, rel=0.1)


def test_poisson_is_reproducible_with_a_seeded_rng() -> None:
    first = schedule(Pattern.POISSON, 100, 10.0, random.Random(42))
    assert first == schedule(Pattern.POISSON, 100, 10.0, random.Random(42))
    assert first != schedule(Pattern.POISSON, 100, 10.0, random.Random(43))


@pytest.mark.parametrize(
    ("pattern", "count", "duration_s", "says"),
    [
        ("burst", 10, 1.0, "pattern 'burst' is not known"),
        ("SPIKE", 10, 1.0, "use one of spike, steady, ramp, poisson"),
        ("", 10, 1.0, "is not known"),
        ("steady", -1, 1.0, "count must not be negative"),
        ("steady", 10, -1.0, "duration"),
        ("steady", 10, math.nan, "duration"),
        ("poisson", 10, math.inf, "duration"),
        ("ramp", 10, -math.inf, "duration"),
    ],
)
def test_bad_input_is_a_config_error(
    pattern: str, count: int, duration_s: float, says: str
) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        schedule(pattern, count, duration_s)


# (count, rate_per_s, burst, arrival_s, predicted seconds)
DRAINS: list[tuple[int, float | None, float, float, float]] = [
    (1_000, None, 1.0, 0.0, 0.0),  # unlimited: done when the arrivals are
    (1_000, None, 1.0, 12.5, 12.5),
    (10, 5.0, 10.0, 0.0, 0.0),  # all within the burst
    (10, 5.0, 20.0, 3.0, 3.0),
    (110, 10.0, 10.0, 0.0, 10.0),  # the burst at once, then 100 at 10/s
    (110, 10.0, 10.0, 4.0, 10.0),
    (110, 10.0, 10.0, 30.0, 30.0),  # arrivals slower than the bucket
    (2_000, 200.0, 20.0, 0.0, 9.9),
    (0, 1.0, 1.0, 0.0, 0.0),
]


@pytest.mark.parametrize(("count", "rate_per_s", "burst", "arrival_s", "drain_s"), DRAINS)
def test_predicted_drain_s(
    count: int, rate_per_s: float | None, burst: float, arrival_s: float, drain_s: float
) -> None:
    assert predicted_drain_s(count, rate_per_s, burst, arrival_s) == pytest.approx(drain_s)
