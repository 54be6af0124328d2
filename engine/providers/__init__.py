"""Delivery channels behind one seam, ``Provider``, and the built-in kinds by name.

``BUILTIN_KINDS[config.kind](config)`` builds a provider or raises ``ConfigError`` with one
sentence naming the bad option; it does no I/O, so it also validates a configuration before
it is saved. Close every provider built with ``aclose``. ``PROVIDER_KINDS`` holds each kind's
declaration (``ProviderKind``: its options, secrets, types and defaults), from which the
validation, the console's hints, ``omnipost provider kinds`` and the options table of
docs/providers.md come.
"""

from __future__ import annotations

from engine.providers import apns, fcm, file, simulated, smtp, twilio, webhook
from engine.providers.base import Provider, ProviderConfig, ProviderFactory
from engine.providers.fcm import FcmProvider
from engine.providers.file import FileProvider
from engine.providers.schema import COMMON_OPTIONS, OptionSpec, ProviderKind
from engine.providers.simulated import SimulatedProvider
from engine.providers.smtp import SmtpProvider
from engine.providers.twilio import TwilioProvider
from engine.providers.webhook import WebhookProvider, verify_signature

__all__ = [
    "BUILTIN_KINDS",
    "COMMON_OPTIONS",
    "PROVIDER_KINDS",
    "FcmProvider",
    "FileProvider",
    "OptionSpec",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "ProviderKind",
    "SimulatedProvider",
    "SmtpProvider",
    "TwilioProvider",
    "WebhookProvider",
    "verify_signature",
]

PROVIDER_KINDS: dict[str, ProviderKind] = {
    kind.name: kind
    for kind in (
        simulated.SPEC,
        file.SPEC,
        webhook.SPEC,
        smtp.SPEC,
        twilio.SPEC,
        fcm.SPEC,
        apns.SPEC,
    )
}
BUILTIN_KINDS: dict[str, ProviderFactory] = {
    name: kind.factory for name, kind in PROVIDER_KINDS.items()
}
