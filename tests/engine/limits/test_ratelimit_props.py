"""Random traces: TokenBucket against an exact reference model, and the rate envelope.

The model uses ``Fraction`` and is written from the design note, not from the code. Traces on
the model run on a grid (eighths of a second, quarter tokens, quarter rates, half bursts) where
float arithmetic is exact, so the bucket must agree with it exactly, boundaries included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.clock import FakeClock
from engine.core.domain import BucketKey, Limit
from engine.limits.bucket import TokenBucket
from engine.limits.envelope import worst_span
from engine.limits.local_limiter import LocalLimiter

BOUNDED = settings(max_examples=200, deadline=None)


@dataclass
class Model:
    """Tokens as of the latest time seen; earlier times see that level and change nothing."""

    rate: Fraction
    burst: Fraction
    tokens: Fraction
    latest: Fraction

    def level(self, t: Fraction) -> Fraction:
        if t <= self.latest:
            return self.tokens
        return min(self.burst, self.tokens + (t - self.latest) * self.rate)

    def catch_up(self, t: Fraction) -> None:
        self.tokens = self.level(t)
        self.latest = max(self.latest, t)

    def take(self, t: Fraction, n: Fraction) -> bool:
        self.catch_up(t)
        if self.tokens < n:
            return False
        self.tokens -= n
        return True

    def wait(self, t: Fraction, n: Fraction) -> float:
        if n > self.burst:
            return math.inf
        missing = n - self.level(t)
        if missing <= 0:
            return 0.0
        # tokens are credited only from the latest time seen, however early t is
        return float(max(Fraction(0), self.latest - t) + missing / self.rate)


@dataclass(frozen=True)
class Op:
    kind: str
    dt8: int  # eighths of a second from the previous op's time; negative goes back
    a: int
    b: int


OPS = st.builds(
    Op,
    kind=st.sampled_from(["take", "take", "take", "wait", "reconfigure", "give", "drain"]),
    dt8=st.integers(-24, 40),
    a=st.integers(0, 24),
    b=st.integers(0, 20),
)


def apply(bucket: TokenBucket, model: Model, op: Op, t: Fraction) -> None:
    now, n = float(t), Fraction(op.a, 4)
    if op.kind == "take":
        assert bucket.try_take(now, float(n)) is model.take(t, n)
    elif op.kind == "wait":
        assert bucket.wait_s(now, float(n)) == pytest.approx(model.wait(t, n), rel=1e-12)
    elif op.kind == "give":
        bucket.give(now, float(n))
        model.catch_up(t)
        model.tokens = min(model.burst, model.tokens + n)
    elif op.kind == "drain":
        bucket.drain(now)
        model.catch_up(t)
        model.tokens = Fraction(0)
    else:
        rate = Fraction(op.a, 4) if op.a > 0 else None
        burst = Fraction(op.b, 2) if op.b >= 2 else None
        bucket.reconfigure(
            now,
            rate_per_s=None if rate is None else float(rate),
            burst=None if burst is None else float(burst),
        )
        model.catch_up(t)
        model.rate = model.rate if rate is None else rate
        model.burst = model.burst if burst is None else burst
        model.tokens = min(model.tokens, model.burst)


@BOUNDED
@given(
    rate4=st.integers(1, 40),
    burst2=st.integers(2, 20),
    ops=st.lists(OPS, max_size=60),
)
def test_bucket_matches_the_model(rate4: int, burst2: int, ops: list[Op]) -> None:
    rate, burst, t = Fraction(rate4, 4), Fraction(burst2, 2), Fraction(0)
    bucket = TokenBucket(float(rate), float(burst), now=0.0)
    model = Model(rate, burst, tokens=burst, latest=t)
    for op in ops:
        t += Fraction(op.dt8, 8)
        apply(bucket, model, op, t)
        assert bucket.tokens_at(float(t)) == model.level(t)
        assert bucket.tokens_at(float(t + 3)) == model.level(t + 3)
        assert (bucket.rate_per_s, bucket.burst) == (float(model.rate), float(model.burst))


def assert_envelope(takes: list[tuple[float, float]], rate_per_s: float, burst: float) -> None:
    """Taken within any window [t, t + W] <= burst + rate_per_s * W (tokens count exactly)."""
    worst = worst_span(takes, rate_per_s, burst, edges=0.0)
    assert worst.holds, worst


TRACE_STEPS = st.lists(
    st.tuples(
        st.floats(-1.0, 3.0),  # time step; below 0 goes back
        st.floats(0.0, 6.0),  # tokens asked for
        st.one_of(st.none(), st.tuples(st.floats(0.01, 100.0), st.floats(1.0, 20.0))),
    ),
    max_size=60,
)


@BOUNDED
@given(rate_per_s=st.floats(0.01, 100.0), burst=st.floats(1.0, 20.0), steps=TRACE_STEPS)
def test_bucket_never_exceeds_the_envelope(
    rate_per_s: float, burst: float, steps: list[tuple[float, float, tuple[float, float] | None]]
) -> None:
    bucket = TokenBucket(rate_per_s, burst, now=0.0)
    now = latest = 0.0
    takes: list[tuple[float, float]] = []
    rate_max, burst_max = rate_per_s, burst
    for dt, n, new_limit in steps:
        now += dt
        latest = max(latest, now)  # a take at an earlier time counts as at the latest seen
        if new_limit is not None:
            bucket.reconfigure(now, *new_limit)
            rate_max, burst_max = max(rate_max, new_limit[0]), max(burst_max, new_limit[1])
        elif bucket.try_take(now, n):
            takes.append((latest, n))
    assert_envelope(takes, rate_max, burst_max)


@BOUNDED
@given(
    limits=st.lists(st.tuples(st.floats(0.05, 50.0), st.integers(1, 10)), min_size=3, max_size=3),
    steps=st.lists(
        st.tuples(st.floats(0.0, 2.0), st.integers(1, 7), st.integers(-1, 8)), max_size=60
    ),
)
def test_local_limiter_keeps_every_bucket_in_its_envelope(
    limits: list[tuple[float, int]], steps: list[tuple[float, int, int]]
) -> None:
    keys = BucketKey.for_send("acme", "mailgun")
    limiter = LocalLimiter(FakeClock(start=0.0))
    for key, (rate_per_s, burst) in zip(keys, limits, strict=True):
        limiter.configure_at(0.0, key, Limit(rate_per_s, burst))
    now = 0.0
    takes: dict[BucketKey, list[tuple[float, float]]] = {key: [] for key in keys}
    for dt, mask, n in steps:
        now += dt
        chosen = [key for bit, key in enumerate(keys) if mask & (1 << bit)]
        reservation = limiter.reserve_at(now, chosen, n)
        assert 0 <= reservation.granted <= max(n, 0)
        assert (reservation.wait_s > 0) is (reservation.granted < n)
        for key in chosen:
            takes[key].append((now, reservation.granted))
    for key, (rate_per_s, burst) in zip(keys, limits, strict=True):
        assert_envelope(takes[key], rate_per_s, burst)
