"""Types of ``engine.providers`` (``__init__.py`` loads each name lazily, from the module this
stub names, on first use: see there)."""

from . import apns, fcm, file, simulated, smtp, twilio, webhook
from .base import Provider, ProviderConfig, ProviderFactory
from .declared import PROVIDER_KINDS
from .fcm import FcmProvider
from .file import FileProvider
from .kinds import BUILTIN_KINDS
from .schema import COMMON_OPTIONS, OptionSpec, ProviderKind
from .simulated import SimulatedProvider
from .smtp import SmtpProvider
from .twilio import TwilioProvider
from .webhook import WebhookProvider, verify_signature

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
    "apns",
    "fcm",
    "file",
    "simulated",
    "smtp",
    "twilio",
    "verify_signature",
    "webhook",
]
