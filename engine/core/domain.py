"""Domain types shared by the store, the limiter, the dispatcher and the providers."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from engine.core.errors import ConfigError, ItemRefused

__all__ = [
    "EXPIRED_DETAIL",
    "MAX_KEY_CHARS",
    "UNSET",
    "BucketKey",
    "BucketLevel",
    "EnqueueItem",
    "Limit",
    "Message",
    "NotificationState",
    "Outcome",
    "SendResult",
    "Unset",
    "check_items",
    "check_recipient_and_key",
    "is_text",
    "limit_of",
    "parse_rate",
    "recipient_key",
    "validate_name",
]


class Unset(enum.Enum):
    """The type of ``UNSET``: write ``limit: Limit | Unset | None = UNSET``, and ``limit is not
    UNSET`` narrows it to ``Limit | None``. An enum of one member, so type checkers know there
    is no other value (PEP 484's pattern for sentinels)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


# "Leave this as it is" for optional arguments where None already means something ("remove the
# limit"). One object shared by every layer, so it survives being passed along.
UNSET: Final = Unset.UNSET


class NotificationState(enum.StrEnum):
    QUEUED = "queued"
    LEASED = "leased"
    DELIVERED = "delivered"
    DEAD = "dead"
    CANCELLED = "cancelled"  # taken out of the queue by request: finished, never sent
    # Its recipient is on the tenant's suppression list for its provider (engine/store/
    # suppressions.py): finished when it was enqueued, never sent.
    SUPPRESSED = "suppressed"
    # Waiting for its ``send_at``: not due, not in the dispatcher's book; queued when it falls
    # due (engine/store/lifetimes.py). Cancellable as a queued one is.
    SCHEDULED = "scheduled"
    # Its deadline (``expires_at``) passed before it was sent: finished, never sent, kept by
    # retention as a dead letter is, and never counted against a provider's circuit.
    EXPIRED = "expired"


# Why a notification whose deadline passed before it was sent ended ``expired``.
EXPIRED_DETAIL = "expired: its deadline passed before it was sent"


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    THROTTLED = "throttled"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    # The provider could not take any message (refused connection, TLS, login, timeout): the
    # message was not tried, spends no attempt, and the failure counts toward the provider's
    # circuit breaker (engine/core/circuit.py).
    UNAVAILABLE = "unavailable"
    # Its deadline passed before the send (decided by the engine, no provider call), or the
    # provider said so (Twilio's 30036): the notification ends ``expired``.
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Limit:
    """A token-bucket limit: ``rate_per_s`` tokens a second, at most ``burst`` saved up."""

    rate_per_s: float
    burst: float

    def __post_init__(self) -> None:
        check_limit(self.rate_per_s, self.burst)

    def __str__(self) -> str:
        return f"{self.rate_per_s:g}/s burst {self.burst:g}"


def check_limit(rate_per_s: float, burst: float) -> None:
    """Raise ``ConfigError`` (a ``ValueError``) unless the rate and burst make a usable bucket."""
    if not isinstance(rate_per_s, int | float) or not math.isfinite(rate_per_s) or rate_per_s <= 0:
        raise ConfigError(f"rate must be a finite number above 0 per second, not {rate_per_s!r}.")
    if not isinstance(burst, int | float) or not math.isfinite(burst) or burst < 1:
        raise ConfigError(f"burst must be a finite number of at least 1, not {burst!r}.")


class BucketScope(enum.StrEnum):
    TENANT = "tenant"
    PROVIDER = "provider"
    PAIR = "pair"
    # A tenant's status-event endpoint (``provider`` holds ``endpoint-<id>``): its own pace,
    # apart from every send's (engine/dispatch/status_events.py).
    ENDPOINT = "endpoint"


@dataclass(frozen=True, slots=True, order=True)
class BucketKey:
    """Names one bucket: a tenant's, a provider's, or a (tenant, provider) pair's."""

    scope: BucketScope
    tenant: str = ""
    provider: str = ""
    # Keys are looked up in dicts and sets on every reservation: hashed once, when made (by
    # the scope's name: an enum member's own hash is a Python call).
    _hash: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.scope._name_, self.tenant, self.provider)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def for_tenant(cls, tenant: str) -> BucketKey:
        return _made(BucketScope.TENANT, tenant, "")

    @classmethod
    def for_provider(cls, provider: str) -> BucketKey:
        return _made(BucketScope.PROVIDER, "", provider)

    @classmethod
    def for_pair(cls, tenant: str, provider: str) -> BucketKey:
        return _made(BucketScope.PAIR, tenant, provider)

    @classmethod
    def for_endpoint(cls, tenant: str, endpoint_id: int) -> BucketKey:
        return cls(BucketScope.ENDPOINT, tenant=tenant, provider=f"endpoint-{endpoint_id}")

    @classmethod
    def for_send(cls, tenant: str, provider: str) -> tuple[BucketKey, BucketKey, BucketKey]:
        """Every bucket that may apply to one send of ``tenant`` through ``provider``."""
        return (cls.for_tenant(tenant), cls.for_provider(provider), cls.for_pair(tenant, provider))

    def __str__(self) -> str:
        if self.scope is BucketScope.TENANT:
            return f"tenant:{self.tenant}"
        if self.scope is BucketScope.PROVIDER:
            return f"provider:{self.provider}"
        if self.scope is BucketScope.ENDPOINT:
            return f"{self.tenant}/{self.provider}"
        return f"pair:{self.tenant}/{self.provider}"


_new = object.__new__
_set = object.__setattr__


def _made(scope: BucketScope, tenant: str, provider: str) -> BucketKey:
    """``BucketKey(scope, tenant, provider)`` without the dataclass's ``__init__``: 300,000
    pair keys at an engine's start at 100,000 tenants, made in half the time."""
    key: BucketKey = _new(BucketKey)
    _set(key, "scope", scope)
    _set(key, "tenant", tenant)
    _set(key, "provider", provider)
    _set(key, "_hash", hash((scope._name_, tenant, provider)))
    return key


@dataclass(frozen=True, slots=True)
class BucketLevel:
    """One bucket's state at one instant, for telemetry and the console."""

    key: BucketKey
    tokens: float
    burst: float
    rate_per_s: float
    blocked_for_s: float = 0.0

    @property
    def fill(self) -> float:
        return max(0.0, min(1.0, self.tokens / self.burst))


@dataclass(slots=True)  # a value; not frozen: built per send (see engine/store/records.py)
class Message:
    """What a provider is asked to deliver. ``recipient`` is plaintext: never log it.

    Two counts, for two readers. ``attempt`` is the lease's claim number, bumped by every claim
    (throttled sends, lease takeovers and requeues included): it rises with every redelivery,
    and is what the store fences on. ``delivery_attempt`` is the attempt as the retry policy
    counts it and a receiver understands it: 1 for the first, one more after each transient
    failure, never above the notification's ``max_attempts``.
    """

    notification_id: int
    tenant: str
    provider: str
    recipient: str = field(repr=False)
    payload: dict[str, Any]
    idempotency_key: str
    attempt: int
    delivery_attempt: int = 1
    # Its deadline (unix s), and what was left of it when the send began: a provider that can
    # tell its network (FCM's ``ttl``, APNs' ``apns-expiration``, Twilio's ``ValidityPeriod``)
    # does. None: no deadline, and no such field is sent.
    expires_at: float | None = None
    ttl_s: float | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    """A provider's answer. ``retry_after_s`` only means something for THROTTLED.

    ``provider_fault`` marks a TRANSIENT failure that is the provider's rather than the
    message's (an HTTP 5xx, an SMTP server error not about the recipient): the message was
    tried and spends its attempt, but a run of them opens the provider's circuit. UNAVAILABLE
    is always the provider's fault.

    ``recipient_gone`` marks a PERMANENT failure that says the recipient will never receive
    again through this provider (an unregistered device, a number that replied STOP): the
    recipient goes on the tenant's suppression list, and later notifications to it are
    ``suppressed`` without being sent."""

    outcome: Outcome
    detail: str = ""
    retry_after_s: float | None = None
    provider_fault: bool = False
    recipient_gone: bool = False

    @property
    def is_provider_fault(self) -> bool:
        """Whether this failure counts toward the provider's circuit breaker."""
        return self.outcome is Outcome.UNAVAILABLE or self.provider_fault

    @classmethod
    def delivered(cls, detail: str = "") -> SendResult:
        return cls(Outcome.DELIVERED, detail)

    @classmethod
    def throttled(cls, retry_after_s: float | None = None, detail: str = "") -> SendResult:
        return cls(Outcome.THROTTLED, detail or "throttled by provider", retry_after_s)

    @classmethod
    def transient(cls, detail: str, *, provider_fault: bool = False) -> SendResult:
        return cls(Outcome.TRANSIENT, detail, provider_fault=provider_fault)

    @classmethod
    def unavailable(cls, detail: str) -> SendResult:
        """The provider cannot take any message now; nothing was sent."""
        return cls(Outcome.UNAVAILABLE, detail)

    @classmethod
    def permanent(cls, detail: str) -> SendResult:
        return cls(Outcome.PERMANENT, detail)

    @classmethod
    def expired(cls, detail: str) -> SendResult:
        """The provider would not send it: its deadline passed (Twilio's 30036)."""
        return cls(Outcome.EXPIRED, detail)

    @classmethod
    def gone(cls, detail: str) -> SendResult:
        """Permanent, and the recipient is gone for good: suppress it from now on."""
        return cls(Outcome.PERMANENT, detail, recipient_gone=True)


_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:/\s*(s|sec|min|m|h|hr))?\s*$")
_PER_S = {None: 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hr": 3600.0}


def parse_rate(text: str) -> float:
    """Parse ``"5"``, ``"5/s"``, ``"300/min"`` or ``"1000/h"`` into tokens per second.

    Raises ``ConfigError`` for anything else, including zero, negative and non-finite rates.
    """
    match = _RATE.match(text)
    if match is None:
        raise ConfigError(f"cannot read {text[:40]!r} as a rate; write N, N/s, N/min or N/h.")
    rate = float(match.group(1)) / _PER_S[match.group(2)]
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigError(f"rate {text[:40]!r} must be a finite number above 0.")
    return rate


def limit_of(rate: str, burst: float | None = None) -> Limit:
    """The limit ``--rate RATE --burst BURST`` asks for, as every command reads the two: RATE
    as ``parse_rate`` reads it; no BURST is one second's worth, at least 1. Raises
    ``ConfigError`` with one sentence."""
    per_s = parse_rate(rate)
    return Limit(per_s, max(1.0, per_s) if burst is None else burst)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def validate_name(kind: str, name: str) -> str:
    """Tenant and provider names: 1-63 of letters, digits, '_', '.', '-', starting alphanumeric."""
    if not _NAME.fullmatch(name):  # match() would let a trailing newline through ($)
        shown = name[:40] + ("..." if len(name) > 40 else "")
        raise ConfigError(
            f"{kind} name {shown!r} is not valid; use 1-63 letters, digits, '_', '.' or '-'."
        )
    return name


MAX_KEY_CHARS = 200  # an idempotency key's longest length


def check_recipient_and_key(recipient: str, key: str | None) -> None:
    """Raise ``ConfigError`` unless a notification may go to ``recipient`` with idempotency key
    ``key`` (``None``: one is made up): a recipient is not empty, a key is 1 to
    ``MAX_KEY_CHARS`` long, and both are valid Unicode text."""
    problem = _problem(recipient, key)
    if problem is not None:
        raise ConfigError(problem[1])


def _problem(recipient: str, key: str | None) -> tuple[str, str] | None:
    """The first thing wrong with ``recipient`` and ``key``: the field and its sentence."""
    if not recipient:
        return "recipient", "the recipient must not be empty."
    if key is not None and not 0 < len(key) <= MAX_KEY_CHARS:
        return "key", f"an idempotency key must be 1 to {MAX_KEY_CHARS} characters."
    if not is_text(recipient):  # undecodable bytes from a shell or a file: no UTF-8 form
        return "recipient", "the recipient holds characters that are not valid Unicode text."
    if not is_text(key or ""):
        return "key", "the idempotency key holds characters that are not valid Unicode text."
    return None


class EnqueueItem(NamedTuple):
    """One notification of a tenant, as ``Engine.enqueue_many`` takes it, from the HTTP route
    and the command line alike: a tuple, so that a batch of thousands costs what tuples cost."""

    provider: str
    recipient: str
    payload: dict[str, Any]
    key: str | None = None  # the notification's idempotency key; None: one is made up
    priority: int = 0  # higher is sent first
    send_at: float | None = None  # unix s; None or a time passed: now
    expires_at: float | None = None  # unix s: never sent after it; None: see ``ttl_s``
    ttl_s: float | None = None  # expires this long after ``send_at`` (or now); None: defaults


_PHONE = re.compile(r"\+[0-9][0-9 ().-]*")
_NOT_DIGIT = re.compile(r"[^0-9]")


def recipient_key(recipient: str) -> str:
    """The form a recipient is known by on a suppression list, so that its usual spellings are
    one recipient: an email address in lower case, without a display name (``Bob
    <BOB@Example.com>`` is ``bob@example.com``), a phone number as ``+`` and its digits (``+1
    (555) 123-4567`` is ``+15551234567``), anything else (a device token, a URL) as given; in
    every case without the white space around it."""
    text = recipient.strip()
    if "@" in text and "://" not in text:
        if text.endswith(">") and "<" in text:
            text = text[text.rindex("<") + 1 : -1].strip()
        return text.lower()
    if text[:1] == "+" and not text[1:].isdigit() and _PHONE.fullmatch(text):
        return "+" + _NOT_DIGIT.sub("", text)
    return text


def check_items(items: Sequence[EnqueueItem]) -> None:
    """Check the recipient and the key of every item, raising ``ItemRefused`` for the first
    that fails (its index and field); a batch that passes (the common case) is checked in a
    few calls."""
    recipients = [item[1] for item in items]
    keys = [item[3] for item in items if item[3] is not None]
    lengths = list(map(len, keys))
    # Python's UTF-8 codec refuses every surrogate, paired or not: joining texts makes none
    # valid that was not.
    if (
        all(recipients)
        and (not keys or (min(lengths) > 0 and max(lengths) <= MAX_KEY_CHARS))
        and is_text("".join(recipients))
        and is_text("".join(keys))
    ):
        return
    for index, item in enumerate(items):
        problem = _problem(item[1], item[3])
        if problem is not None:
            raise ItemRefused(index, *problem)


def is_text(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form: not so for lone surrogates, which is how Python keeps
    bytes it could not decode (from ``argv``, a file, or a JSON escape such as ``"\\udcff"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
