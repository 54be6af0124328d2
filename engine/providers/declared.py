"""``PROVIDER_KINDS``: each built-in kind's declaration (``ProviderKind``) by name, from which
the validation, the console's hints, ``omnipost provider kinds`` and the options table of
docs/providers.md come. Importing it imports every kind's module."""

from __future__ import annotations

from engine.providers.kinds import KIND_NAMES, declaration
from engine.providers.schema import ProviderKind

__all__ = ["PROVIDER_KINDS"]

PROVIDER_KINDS: dict[str, ProviderKind] = {kind: declaration(kind) for kind in KIND_NAMES}
