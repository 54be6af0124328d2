"""Delivery channels behind one seam, ``Provider``, and the built-in kinds by name.

``BUILTIN_KINDS[config.kind](config)`` builds a provider or raises ``ConfigError`` with one
sentence naming the bad option; it does no I/O, so it also validates a configuration before
it is saved. Close every provider built with ``aclose``. ``PROVIDER_KINDS`` holds each kind's
declaration (``ProviderKind``: its options, secrets, types and defaults), from which the
validation, the console's hints, ``omnipost provider kinds`` and the options table of
docs/providers.md come.

Every name is loaded when it is first used (``lazy_loader``), from the module that
``__init__.pyi`` names for it, as in the ``engine`` façade; and each kind's module is loaded
when its factory first builds a provider (``kinds.py``). So the dispatcher's imports of
``base`` and ``schema`` load neither the SMTP, Twilio, FCM and APNs kinds nor the others, and
an engine loads the kinds its store configures.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
