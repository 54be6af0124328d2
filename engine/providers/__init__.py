"""Delivery channels behind one seam, ``Provider``, and the built-in kinds by name.

``BUILTIN_KINDS[config.kind](config)`` builds a provider or raises ``ConfigError`` with one
sentence naming the bad option; it does no I/O, so it also validates a configuration before
it is saved. Close every provider built with ``aclose``.
"""

from __future__ import annotations

from engine.providers import file, simulated, smtp, webhook
from engine.providers.base import Provider, ProviderConfig, ProviderFactory
from engine.providers.file import FileProvider
from engine.providers.simulated import SimulatedProvider
from engine.providers.smtp import SmtpProvider
from engine.providers.webhook import WebhookProvider, verify_signature

__all__ = [
    "BUILTIN_KINDS",
    "FileProvider",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "SimulatedProvider",
    "SmtpProvider",
    "WebhookProvider",
    "verify_signature",
]

BUILTIN_KINDS: dict[str, ProviderFactory] = {
    simulated.KIND: SimulatedProvider.from_config,
    file.KIND: FileProvider.from_config,
    webhook.KIND: WebhookProvider.from_config,
    smtp.KIND: SmtpProvider.from_config,
}
