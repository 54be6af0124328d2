"""The built-in kinds by name. ``BUILTIN_KINDS`` holds each kind's factory, which imports the
kind's module when it first builds a provider (or validates a configuration): an engine loads
the modules of the kinds its store configures, and a command that builds none (``tenant
list``) loads none. ``PROVIDER_KINDS`` holds each kind's declaration, and so imports them all.
"""

from __future__ import annotations

import importlib

from engine.providers.base import Provider, ProviderConfig, ProviderFactory
from engine.providers.schema import ProviderKind

__all__ = ["BUILTIN_KINDS", "KIND_NAMES", "declaration"]

# Each kind's name is its module's name, in the order the kinds are listed.
KIND_NAMES = ("simulated", "file", "webhook", "smtp", "twilio", "fcm", "apns")


def declaration(kind: str) -> ProviderKind:
    """The declaration (``SPEC``) of the built-in ``kind``, imported on first use."""
    spec: ProviderKind = importlib.import_module(f"engine.providers.{kind}").SPEC
    return spec


def _factory(kind: str) -> ProviderFactory:
    def build(config: ProviderConfig) -> Provider:
        return declaration(kind).factory(config)

    return build


BUILTIN_KINDS: dict[str, ProviderFactory] = {kind: _factory(kind) for kind in KIND_NAMES}
