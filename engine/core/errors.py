"""One error hierarchy for OmniPost; adapters translate driver errors into it.

Each class's docstring is its default message, so ``raise NotFound()`` already says something
a person can read. Every message is a single sentence that is safe to show: no secrets.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Conflict",
    "NotFound",
    "OmniPostError",
    "SecretUnreadable",
    "StoreError",
    "StoreUnavailable",
]


class OmniPostError(Exception):
    """OmniPost failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ConfigError(OmniPostError, ValueError):
    """The configuration is not valid."""


class NotFound(OmniPostError, LookupError):
    """No such item."""


class Conflict(OmniPostError):
    """That item already exists."""


class SecretUnreadable(OmniPostError):
    """A stored secret cannot be decrypted with the configured keys."""


class StoreError(OmniPostError):
    """The store failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached."""
