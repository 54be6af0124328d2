"""The provider seam: every delivery channel implements ``Provider``."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from engine.clock import Clock
from engine.domain import Message, SendResult

__all__ = ["Provider", "ProviderConfig", "ProviderFactory", "send_within"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """A provider as configured in the store. ``secrets`` are plaintext here: never log them."""

    name: str
    kind: str
    options: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


class Provider(Protocol):
    """Delivers messages. ``send`` never raises for a delivery problem: it returns an outcome.

    Every call carries the message's idempotency key, so a redelivery is recognisable downstream.

    Say whose fault a failure is, so that the provider's circuit breaker (engine/health.py) can
    stop sending while the provider itself is down: ``SendResult.unavailable(detail)`` when the
    provider could not take any message (no connection, TLS, a failed login, a timeout): the
    notification stays queued, spends no attempt and is never dead for it; and
    ``SendResult.transient(detail, provider_fault=True)`` for a failure the provider reported
    (a 5xx): the attempt is spent, and a run of them opens the circuit all the same. Anything
    about one message (a refused recipient, a 4xx) stays ``permanent`` or ``transient``. Every
    kind takes the circuit options ``circuit_failures`` (3), ``circuit_backoff_s`` (5) and
    ``circuit_backoff_max_s`` (300).
    """

    name: str

    async def send(self, message: Message) -> SendResult: ...

    async def aclose(self) -> None: ...


# Builds a provider from its configuration; raises ConfigError with one clear sentence when an
# option is missing or invalid. Also used to validate a configuration before it is saved.
ProviderFactory = Callable[[ProviderConfig], Provider]


async def send_within(
    provider: Provider, message: Message, clock: Clock, timeout_s: float
) -> SendResult:
    """``provider.send(message)``, as an outcome whatever happens: one that takes longer than
    ``timeout_s`` on ``clock`` is the provider's failure (it counts toward its circuit), and
    one that raises is a transient failure (a provider bug must not kill the worker). A
    provider with a ``max_latency_s`` attribute below ``timeout_s`` (one that bounds its own
    time, as the simulated one does) is not timed."""
    try:
        if getattr(provider, "max_latency_s", math.inf) < timeout_s:
            return await provider.send(message)  # it says it answers in time: no timer
        async with clock.timeout(timeout_s):
            return await provider.send(message)
    except TimeoutError:
        return SendResult.unavailable(f"provider did not answer in {timeout_s:g}s")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("provider raised instead of returning an outcome")
        return SendResult.transient(f"provider error: {type(exc).__name__}")
