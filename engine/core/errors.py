"""One error hierarchy for OmniPost; adapters translate driver errors into it.

Each class's docstring is its default message, so ``raise NotFound()`` already says something
a person can read. Every message is a single sentence that is safe to show: no secrets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # domain.py imports this module
    from engine.core.domain import NotificationState

__all__ = [
    "ConfigError",
    "Conflict",
    "NotCancellable",
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


class NotCancellable(Conflict):
    """Only a queued notification can be cancelled."""

    def __init__(self, notification_id: int, state: NotificationState) -> None:
        super().__init__(
            f"notification {notification_id} is {state}; only a queued notification can be "
            "cancelled."
        )
        self.notification_id = notification_id
        self.state = state  # the state it is in: leased, delivered, dead or cancelled

    def __reduce__(self) -> tuple[type[NotCancellable], tuple[int, NotificationState]]:
        return type(self), (self.notification_id, self.state)  # pickled by its arguments


class SecretUnreadable(OmniPostError):
    """A stored secret cannot be decrypted with the configured keys."""


class StoreError(OmniPostError):
    """The store failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached."""
