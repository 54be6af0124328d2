"""The provider seam: every delivery channel implements ``Provider``."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from engine.core.clock import Clock
from engine.core.domain import Message, SendResult

__all__ = [
    "BatchProvider",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "batch_size",
    "send_many_within",
    "send_parcel",
    "send_within",
]

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

    Say whose fault a failure is, so that the provider's circuit breaker
    (engine/core/circuit.py) can stop sending while the provider itself is down:
    ``SendResult.unavailable(detail)`` when the provider could not take any message (no
    connection, TLS, a failed login, a timeout): the notification stays queued, spends no
    attempt and is never dead for it; and
    ``SendResult.transient(detail, provider_fault=True)`` for a failure the provider reported
    (a 5xx): the attempt is spent, and a run of them opens the circuit all the same. Anything
    about one message (a refused recipient, a 4xx) stays ``permanent`` or ``transient``. Every
    kind takes the circuit options ``circuit_failures`` (3), ``circuit_backoff_s`` (5) and
    ``circuit_backoff_max_s`` (300).

    A provider that can take many messages in one call (an API that accepts a list of
    recipients, a file append of many lines) opts in by also being a ``BatchProvider``.
    """

    name: str

    async def send(self, message: Message) -> SendResult: ...

    async def aclose(self) -> None: ...


class BatchProvider(Provider, Protocol):
    """A ``Provider`` that also takes up to ``batch_max`` messages in one call.

    ``send_many`` returns one outcome per message, in the order given, and never raises for a
    delivery problem, as ``send``. The dispatcher hands it the leases of one (tenant,
    provider) key at a time, each with its own token already taken, so the rate limits hold
    as they do for single sends; a batch that fails as a whole (no connection, a timeout)
    returns the same outcome for each. ``batch_max`` of 1 (or no ``send_many``) is a provider
    that sends one at a time. The ``file`` and ``simulated`` kinds take the option
    ``batch_max`` (default 1).
    """

    batch_max: int

    async def send_many(self, messages: Sequence[Message]) -> Sequence[SendResult]: ...


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


def batch_size(provider: Provider) -> int:
    """How many messages ``provider`` takes in one call: its ``batch_max`` when it is a
    ``BatchProvider`` with one above 1, else 1."""
    size = getattr(provider, "batch_max", 1)
    if not isinstance(size, int) or size < 2 or not hasattr(provider, "send_many"):
        return 1
    return size


async def send_many_within(
    provider: BatchProvider, messages: Sequence[Message], clock: Clock, timeout_s: float
) -> Sequence[SendResult]:
    """``provider.send_many(messages)`` as ``send_within`` sends one: one outcome per message
    whatever happens. A call that takes longer than ``timeout_s``, raises, or answers with
    the wrong number of outcomes gives every message the same failure."""
    try:
        if getattr(provider, "max_latency_s", math.inf) < timeout_s:
            results = await provider.send_many(messages)
        else:
            async with clock.timeout(timeout_s):
                results = await provider.send_many(messages)
    except TimeoutError:
        failed = SendResult.unavailable(f"provider did not answer in {timeout_s:g}s")
        return [failed] * len(messages)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("provider raised instead of returning outcomes")
        return [SendResult.transient(f"provider error: {type(exc).__name__}")] * len(messages)
    if len(results) != len(messages):
        log.error(
            "provider %s gave %d outcomes for %d messages",
            provider.name,
            len(results),
            len(messages),
        )
        wrong = SendResult.transient(
            f"provider error: {len(results)} outcomes for {len(messages)} messages"
        )
        return [wrong] * len(messages)
    return results


async def send_parcel(
    provider: Provider, messages: Sequence[Message], clock: Clock, timeout_s: float
) -> Sequence[SendResult]:
    """One message through ``send_within``; several (the provider takes batches: see
    ``batch_size``) through ``send_many_within``."""
    if len(messages) == 1:
        return [await send_within(provider, messages[0], clock, timeout_s)]
    return await send_many_within(cast(BatchProvider, provider), messages, clock, timeout_s)
