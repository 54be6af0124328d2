"""The provider seam: every delivery channel implements ``Provider``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from engine.domain import Message, SendResult

__all__ = ["Provider", "ProviderConfig", "ProviderFactory"]


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
    """

    name: str

    async def send(self, message: Message) -> SendResult: ...

    async def aclose(self) -> None: ...


# Builds a provider from its configuration; raises ConfigError with one clear sentence when an
# option is missing or invalid. Also used to validate a configuration before it is saved.
ProviderFactory = Callable[[ProviderConfig], Provider]
