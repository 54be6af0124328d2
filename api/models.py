"""The bodies the API reads and writes, as pydantic models: they validate requests (a bad
field is a 422 naming it) and describe both directions in the OpenAPI document."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
)

from engine import MAX_KEY_CHARS, NotificationView, is_text, rfc3339

__all__ = [
    "MAX_BATCH",
    "NAME_PATTERN",
    "Batch",
    "BatchAnswer",
    "Cancelled",
    "Health",
    "Incoming",
    "Limits",
    "NewNotification",
    "Notification",
    "NotificationPage",
    "Problem",
    "Queued",
    "RateLimit",
    "read_incoming",
    "utc_text",
]

MAX_BATCH = 1000
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"  # tenant and provider names, as the engine's
StateName = Literal[
    "queued", "scheduled", "leased", "delivered", "dead", "cancelled", "suppressed", "expired"
]


def _text(value: str) -> str:
    if not is_text(value):  # a lone surrogate, from a JSON escape such as "\udcff"
        raise ValueError("holds characters that are not valid Unicode text")
    if "\x00" in value:  # "\u0000": no database keeps it in text
        raise ValueError("holds a NUL character")
    return value


Text = Annotated[str, AfterValidator(_text)]


class NewNotification(BaseModel):
    """One notification to queue."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(pattern=NAME_PATTERN, description="A configured provider's name.")
    recipient: Text = Field(
        min_length=1,
        max_length=4096,
        description="Where it goes (an address, a number, a URL, a device token); kept "
        "encrypted and shown masked.",
    )
    payload: dict[str, Any] = Field(
        default_factory=dict, description="What the provider sends (its `subject`, `text`...)."
    )
    key: Text | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="The notification's own idempotency key: a key the tenant used before "
        "answers the notification it named (`duplicate: true`) instead of queueing another.",
    )
    priority: int = Field(
        default=0, ge=-1_000_000, le=1_000_000, description="Higher is sent first."
    )
    send_at: AwareDatetime | None = Field(
        default=None,
        description="Not sent before this time (RFC 3339 with an offset, such as "
        "`2026-12-07T09:00:00+01:00`): `scheduled` until then. A time passed sends now; one "
        "more than 35 days ahead (the server's bound) is refused.",
    )
    expires_at: AwareDatetime | None = Field(
        default=None,
        description="Never sent after this time (RFC 3339 with an offset): it ends `expired` "
        "instead. Must come after `send_at` (or now). Give this or `ttl_s`, not both.",
    )
    ttl_s: float | None = Field(
        default=None,
        gt=0,
        le=35 * 86400,
        description="Never sent later than this many seconds after its send time (`send_at`, "
        "or now). Given neither this nor `expires_at`, the tenant's default deadline applies, "
        "else the provider's, else none.",
    )


class Batch(BaseModel):
    """Up to 1,000 notifications, queued all together or not at all."""

    model_config = ConfigDict(extra="forbid")

    notifications: list[NewNotification] = Field(min_length=1, max_length=MAX_BATCH)


def _shape(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "notifications" in value else "one"


# A POST's body: one notification or a batch, told apart by the ``notifications`` field, so that
# each body is checked against the one shape it is (and its errors name that shape's fields).
Incoming = Annotated[
    Annotated[NewNotification, Tag("one")] | Annotated[Batch, Tag("batch")],
    Discriminator(_shape),
]
_BATCH = TypeAdapter(Batch)
_ONE = TypeAdapter(NewNotification)


def read_incoming(raw: bytes) -> NewNotification | Batch:
    """A JSON body that is plainly one shape, read by pydantic in one pass (``api.direct``'s
    quick reading): a body naming ``notifications`` as a batch, any other as one notification.
    Raises ``ValueError`` for any body that is not valid as that shape (even one ``Incoming``
    would take: a batch key written with escapes), for the usual reading to decide."""
    return (_BATCH if b'"notifications"' in raw else _ONE).validate_json(raw)


class Queued(BaseModel):
    """A notification just queued (or, with `duplicate`, the one its key named before)."""

    id: int
    state: StateName
    duplicate: bool
    provider: str
    key: str | None
    send_at: datetime | None = Field(
        default=None, description="When it is to be sent, in UTC; null: now (or sent)."
    )
    expires_at: datetime | None = Field(
        default=None, description="Its deadline, in UTC; null: none."
    )


class BatchAnswer(BaseModel):
    notifications: list[Queued]


class Notification(BaseModel):
    """A notification as its tenant sees it; the recipient is masked."""

    id: int
    state: StateName
    provider: str
    recipient: str = Field(description="Masked: the first and last characters only.")
    key: str
    priority: int
    attempts: int = Field(description="Times it was taken to be sent so far.")
    max_attempts: int
    enqueued_at: float = Field(description="Unix time, seconds.")
    available_at: float = Field(description="When it is (or was) next due, unix seconds.")
    finished_at: float | None = Field(
        description="Delivered, dead, cancelled, suppressed or expired at."
    )
    last_error: str | None
    expires_at: float | None = Field(
        default=None, description="Its deadline, unix seconds; null: none."
    )

    @classmethod
    def of(cls, view: NotificationView, provider: str) -> Notification:
        return cls(
            id=view.id,
            state=view.state.value,
            provider=provider,
            recipient=view.recipient_masked,
            key=view.idempotency_key,
            priority=view.priority,
            attempts=view.attempt,
            max_attempts=view.max_attempts,
            enqueued_at=view.enqueued_at,
            available_at=view.available_at,
            finished_at=view.finished_at,
            last_error=view.last_error,
            expires_at=view.expires_at,
        )


def utc_text(at: float | None) -> str | None:
    """Unix seconds as RFC 3339 in UTC (``2026-12-07T08:00:00Z``); None stays None."""
    return None if at is None else rfc3339(at)


class NotificationPage(BaseModel):
    notifications: list[Notification]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class Cancelled(BaseModel):
    notification: Notification


class RateLimit(BaseModel):
    rate_per_s: float
    burst: float


class Limits(BaseModel):
    """The calling tenant's limits."""

    tenant: str
    dispatch: RateLimit | None = Field(description="Sends per second across its providers.")
    providers: dict[str, RateLimit] = Field(description="Its limits with particular providers.")
    requests: RateLimit = Field(description="API requests per second, for each of its keys.")
    max_queued: int = Field(description="The most notifications it may hold queued.")
    queued: int = Field(description="How many it holds queued now.")


class Health(BaseModel):
    status: Literal["ok"]


class Problem(BaseModel):
    """An error, as RFC 9457 `application/problem+json`."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    field: str | None = Field(default=None, description="The request field at fault, if one.")
