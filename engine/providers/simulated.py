"""A provider that delivers nothing and answers like a real one: for demos, bursts and tests.

Options (all strings, all optional):

``latency_ms`` (default 5) and ``latency_jitter_ms`` (default 0)
    Each send waits a latency drawn uniformly from ``latency_ms ± latency_jitter_ms``, clamped
    at 0. Uniform rather than lognormal on purpose: it is bounded, so a test or a burst demo
    knows the longest a send can take, and its mean is ``latency_ms`` whenever the jitter is
    not larger than the mean.
``throttle_rate``, ``error_rate``, ``permanent_rate`` (each 0 to 1, default 0, sum at most 1)
    The chance that a send is throttled (with ``retry_after_s``, default 1.0), fails
    transiently, or fails permanently. The rest are delivered.
``seed``
    A whole number that makes the sequence of latencies and outcomes reproducible.
``batch_max`` (default 1)
    How many messages one call takes, as a provider with a batch API: a call of many waits
    one latency, then draws each message's outcome.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Self

from engine.core.clock import Clock, SystemClock
from engine.core.domain import Message, SendResult
from engine.core.errors import ConfigError
from engine.providers.base import ProviderConfig
from engine.providers.schema import OptionSpec, ProviderKind

__all__ = ["KIND", "SPEC", "SimulatedProvider"]

KIND = "simulated"
_DELIVERED = SendResult.delivered("simulated")  # a frozen value: one serves every send

OPTIONS = (
    OptionSpec("latency_ms", "number", 5.0, help="mean latency of a send, in milliseconds"),
    OptionSpec("latency_jitter_ms", "number", 0.0, help="latency drawn uniformly within ± this"),
    OptionSpec("throttle_rate", "rate", 0.0, help="chance that a send is throttled"),
    OptionSpec("error_rate", "rate", 0.0, help="chance that a send fails transiently"),
    OptionSpec("permanent_rate", "rate", 0.0, help="chance that a send fails permanently"),
    OptionSpec(
        "retry_after_s", "number", 1.0, high=86_400, help="the Retry-After of a simulated throttle"
    ),
    OptionSpec(
        "seed",
        "integer",
        low=-(2**63),
        high=2**63 - 1,
        help="makes the latencies and outcomes reproducible",
    ),
    OptionSpec(
        "batch_max", "integer", 1, low=1, high=10_000, help="most messages taken in one call"
    ),
)


class SimulatedProvider:
    """Sleeps a random latency, then draws an outcome with the configured probabilities.

    ``rng`` (a ``random.Random``) wins over ``seed``; with neither, draws are unseeded. The
    latency passes on ``clock`` (real time by default; the planner's virtual time).
    Raises ``ConfigError`` when the rates add up to more than 1.
    """

    def __init__(
        self,
        name: str = KIND,
        *,
        latency_ms: float = 5.0,
        latency_jitter_ms: float = 0.0,
        error_rate: float = 0.0,
        throttle_rate: float = 0.0,
        permanent_rate: float = 0.0,
        retry_after_s: float = 1.0,
        seed: int | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        batch_max: int = 1,
    ) -> None:
        if throttle_rate + error_rate + permanent_rate > 1.0 + 1e-9:
            raise ConfigError(
                f"provider {name!r}: options 'throttle_rate', 'error_rate' and "
                "'permanent_rate' must add up to at most 1."
            )
        self.name = name
        self.latency_ms = latency_ms
        self.latency_jitter_ms = latency_jitter_ms
        self.error_rate = error_rate
        self.throttle_rate = throttle_rate
        self.permanent_rate = permanent_rate
        self.retry_after_s = retry_after_s
        self.seed = seed
        self.batch_max = batch_max
        self._rng = rng if rng is not None else random.Random(seed)
        self._clock = clock or SystemClock()
        self.sent = 0

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """Build from string options; raises ``ConfigError`` naming the first bad option."""
        opts = SPEC.read(config)
        return cls(
            config.name,
            latency_ms=opts.number("latency_ms"),
            latency_jitter_ms=opts.number("latency_jitter_ms"),
            error_rate=opts.number("error_rate"),
            throttle_rate=opts.number("throttle_rate"),
            permanent_rate=opts.number("permanent_rate"),
            retry_after_s=opts.number("retry_after_s"),
            seed=opts.integer("seed"),
            batch_max=opts.integer("batch_max") or 1,
        )

    @property
    def max_latency_s(self) -> float:
        """The longest a send can take: ``send_within`` need not time it."""
        most_ms = self.latency_ms + self.latency_jitter_ms  # asked per send: max() written out
        return (most_ms if most_ms > 0.0 else 0.0) / 1000.0

    def draw_latency_s(self) -> float:
        """One latency in seconds: uniform over ``latency_ms ± latency_jitter_ms``, at least 0."""
        jitter = self.latency_jitter_ms
        # ``rng.uniform(-jitter, jitter)``, bit for bit, without its call: drawn per send.
        drawn = self.latency_ms + (
            -jitter + (jitter + jitter) * self._rng.random() if jitter else 0.0
        )
        return (drawn if drawn > 0.0 else 0.0) / 1000.0

    def draw_result(self) -> SendResult:
        """One outcome, from a single uniform draw split by the configured rates."""
        draw = self._rng.random()
        if draw < self.throttle_rate:
            return SendResult.throttled(self.retry_after_s, "simulated throttle")
        draw -= self.throttle_rate
        if draw < self.error_rate:
            return SendResult.transient("simulated transient failure")
        draw -= self.error_rate
        if draw < self.permanent_rate:
            return SendResult.permanent("simulated permanent failure")
        return _DELIVERED

    async def send(self, message: Message) -> SendResult:
        """Wait the drawn latency, then return the drawn outcome. Never raises."""
        await self._clock.sleep(self.draw_latency_s())
        self.sent += 1
        return self.draw_result()

    async def send_many(self, messages: Sequence[Message]) -> list[SendResult]:
        """Wait one drawn latency for the whole call, then draw each message's outcome."""
        await self._clock.sleep(self.draw_latency_s())
        self.sent += len(messages)
        return [self.draw_result() for _ in messages]

    async def aclose(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return (
            f"SimulatedProvider(name={self.name!r}, latency_ms={self.latency_ms:g}"
            f"±{self.latency_jitter_ms:g}, throttle_rate={self.throttle_rate:g}, "
            f"error_rate={self.error_rate:g}, permanent_rate={self.permanent_rate:g}, "
            f"batch_max={self.batch_max}, sent={self.sent})"
        )


SPEC = ProviderKind(
    KIND,
    "delivers nothing; answers with the configured latency and chances",
    OPTIONS,
    SimulatedProvider.from_config,
)
