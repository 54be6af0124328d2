"""SimulatedProvider: outcome rates, reproducibility, latency bounds, option validation."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from engine.core.domain import Outcome
from engine.core.errors import ConfigError
from engine.providers import ProviderConfig, SimulatedProvider
from testkit.support import message


def config(**options: str) -> ProviderConfig:
    return ProviderConfig("sim", "simulated", options)


async def test_outcome_rates_over_2000_seeded_draws() -> None:
    provider = SimulatedProvider(
        latency_ms=0,
        throttle_rate=0.2,
        error_rate=0.1,
        permanent_rate=0.05,
        retry_after_s=2.5,
        rng=random.Random(42),
    )
    results = [await provider.send(message(i)) for i in range(2000)]
    counts = Counter(r.outcome for r in results)
    assert counts[Outcome.THROTTLED] == pytest.approx(400, abs=60)
    assert counts[Outcome.TRANSIENT] == pytest.approx(200, abs=45)
    assert counts[Outcome.PERMANENT] == pytest.approx(100, abs=30)
    assert counts[Outcome.DELIVERED] == pytest.approx(1300, abs=70)
    throttled = [r for r in results if r.outcome is Outcome.THROTTLED]
    assert {r.retry_after_s for r in throttled} == {2.5}
    assert provider.sent == 2000


async def test_the_same_seed_gives_the_same_outcomes() -> None:
    cfg = config(latency_ms="0", error_rate="0.3", throttle_rate="0.3", seed="7")
    first, second = SimulatedProvider.from_config(cfg), SimulatedProvider.from_config(cfg)
    a = [(await first.send(message(i))).outcome for i in range(200)]
    b = [(await second.send(message(i))).outcome for i in range(200)]
    assert a == b
    assert len(set(a)) == 3


async def test_defaults_deliver_everything() -> None:
    provider = SimulatedProvider.from_config(config())
    assert (provider.latency_ms, provider.latency_jitter_ms) == (5.0, 0.0)
    assert (provider.error_rate, provider.throttle_rate, provider.permanent_rate) == (0, 0, 0)
    assert provider.retry_after_s == 1.0
    assert (await provider.send(message())).outcome is Outcome.DELIVERED


def test_latency_is_uniform_within_jitter_and_never_negative() -> None:
    provider = SimulatedProvider(latency_ms=10, latency_jitter_ms=4, rng=random.Random(1))
    draws = [provider.draw_latency_s() for _ in range(2000)]
    assert min(draws) >= 0.006
    assert max(draws) <= 0.014
    assert sum(draws) / len(draws) == pytest.approx(0.010, abs=0.0003)
    clamped = SimulatedProvider(latency_ms=1, latency_jitter_ms=5, rng=random.Random(1))
    assert min(clamped.draw_latency_s() for _ in range(200)) == 0.0


async def test_send_waits_the_latency() -> None:
    provider = SimulatedProvider(latency_ms=30)
    started = time.perf_counter()
    await provider.send(message())
    assert time.perf_counter() - started >= 0.025


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"latency_ms": "-1"}, "'latency_ms' must be a number at least 0"),
        ({"latency_ms": "fast"}, "'latency_ms'"),
        ({"latency_jitter_ms": "nan"}, "'latency_jitter_ms'"),
        ({"error_rate": "1.5"}, "'error_rate' must be a number at least 0 and at most 1"),
        ({"throttle_rate": "-0.1"}, "'throttle_rate'"),
        ({"permanent_rate": "x"}, "'permanent_rate'"),
        ({"retry_after_s": "inf"}, "'retry_after_s'"),
        ({"seed": "1.5"}, "'seed' must be a whole number"),
        ({"error_rate": "0.6", "throttle_rate": "0.6"}, "add up to at most 1"),
        ({"latency": "5"}, "'latency' is not known to a simulated provider"),
    ],
)
def test_bad_options_are_refused_with_one_sentence(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SimulatedProvider.from_config(config(**options))
    text = str(caught.value)
    assert fragment in text
    assert text.startswith("provider 'sim':")
    assert text.endswith(".")
    assert ". " not in text


def test_repr_shows_state() -> None:
    provider = SimulatedProvider.from_config(config(error_rate="0.25"))
    assert repr(provider).startswith("SimulatedProvider(name='sim'")
    assert "error_rate=0.25" in repr(provider)
