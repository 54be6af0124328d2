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
    "ItemRefused",
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


class ItemRefused(ConfigError):
    """One item of a batch was refused, and nothing of the batch was written."""

    def __init__(self, index: int, field: str, reason: str) -> None:
        super().__init__(f"item {index}, {field}: {reason}")
        self.index = index  # the item's place in the batch, from 0
        self.field = field  # ``provider``, ``recipient`` or ``key``
        self.reason = reason  # one sentence

    def __reduce__(self) -> tuple[type[ItemRefused], tuple[int, str, str]]:
        return (ItemRefused, (self.index, self.field, self.reason))


class NotFound(OmniPostError, LookupError):
    """No such item."""


class Conflict(OmniPostError):
    """That item already exists."""


class NotCancellable(Conflict):
    """Only a queued or scheduled notification can be cancelled."""

    def __init__(self, notification_id: int, state: NotificationState) -> None:
        super().__init__(
            f"notification {notification_id} is {state}; only a queued or scheduled notification "
            "can be cancelled."
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
