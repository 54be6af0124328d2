"""Status events, pure: what becomes of a notification told to the tenant's application.

An event endpoint (a URL of the tenant's) subscribes to some of ``EVENT_TYPES``; each event is
signed by the Standard Webhooks 1.0 rules (``webhook-id``, ``webhook-timestamp``,
``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, secrets ``whsec_...``)
and retried on ``EVENT_RETRY``'s waits. The store writes events in the transaction of the state
change (``engine/store/status_events.py``), the courier delivers them
(``engine/dispatch/status_events.py``). Which addresses an endpoint may reach is decided here
too (``refused_address``), before any connection.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import ipaddress
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from engine.core.errors import ConfigError

__all__ = [
    "ALL_EVENTS",
    "BODY_MOST_BYTES",
    "EVENT_RETRY_S",
    "EVENT_TYPES",
    "EventState",
    "EventType",
    "check_endpoint_url",
    "event_body",
    "event_names",
    "new_secret",
    "parse_events",
    "refused_address",
    "sign",
    "signature_header",
    "signed_headers",
]


class EventState(enum.StrEnum):
    """Where an event of the outbox is."""

    PENDING = "pending"
    LEASED = "leased"
    DELIVERED = "delivered"
    FAILED = "failed"  # given up after every retry (shown; replayable)
    HELD = "held"  # its endpoint is disabled


class EventType(enum.StrEnum):
    DELIVERED = "notification.delivered"
    ATTEMPT_FAILED = "notification.attempt_failed"
    DEAD = "notification.dead"
    CANCELLED = "notification.cancelled"
    SUPPRESSED = "notification.suppressed"
    EXPIRED = "notification.expired"
    SCHEDULED = "notification.scheduled"
    TEST = "webhook.test"  # sent by ``omnipost webhook test``, whatever the subscription

    @property
    def bit(self) -> int:
        """The type's bit in an endpoint's ``events`` mask (the store's triggers test it)."""
        return _BITS[self]


# The bits are stored (``event_endpoints.events``) and written into the store's triggers: never
# renumber one.
_BITS = {
    EventType.DELIVERED: 1,
    EventType.ATTEMPT_FAILED: 2,
    EventType.DEAD: 4,
    EventType.CANCELLED: 8,
    EventType.SUPPRESSED: 16,
    EventType.EXPIRED: 32,
    EventType.SCHEDULED: 64,
    EventType.TEST: 0,
}
EVENT_TYPES: tuple[EventType, ...] = tuple(t for t in EventType if t is not EventType.TEST)
ALL_EVENTS = sum(t.bit for t in EVENT_TYPES)

# Retries of one event: about 5 s, 5 min, 30 min, 2 h, 5 h and 10 h after the tries before, then
# given up (shown, and replayable). A ``Retry-After`` answer replaces the wait it comes with.
EVENT_RETRY_S: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0)
BODY_MOST_BYTES = 20_000
_SECRET_PREFIX = "whsec_"  # noqa: S105 (the format's prefix, not a secret)


def parse_events(names: Iterable[str] | None) -> int:
    """The mask of the event types ``names`` (``notification.delivered`` or ``delivered``; all
    of them for None or ``*``). ConfigError naming an unknown one."""
    if names is None:
        return ALL_EVENTS
    mask = 0
    for raw in names:
        name = raw.strip()
        if name in ("*", "all"):
            return ALL_EVENTS
        full = name if "." in name else f"notification.{name}"
        try:
            kind = EventType(full)
        except ValueError:
            known = ", ".join(t.value for t in EVENT_TYPES)
            raise ConfigError(f"{name!r} is not an event type; the types are {known}.") from None
        if kind is EventType.TEST:
            raise ConfigError("webhook.test is sent on request only; it cannot be subscribed to.")
        mask |= kind.bit
    if not mask:
        raise ConfigError("an endpoint subscribes to at least one event type.")
    return mask


def event_names(mask: int) -> list[str]:
    """The event types of ``mask``, in ``EVENT_TYPES``' order."""
    return [t.value for t in EVENT_TYPES if mask & t.bit]


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return _SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode("ascii")


def _secret_bytes(secret: str) -> bytes:
    body = secret.removeprefix(_SECRET_PREFIX)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError("a signing secret is whsec_ and base64.") from exc


def sign(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,`` signature of ``body`` sent as ``event_id`` at ``timestamp`` (unix s)."""
    signed = f"{event_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: Sequence[str], event_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret (two during a rotation),
    separated by spaces, as the specification allows."""
    return " ".join(sign(s, event_id, timestamp, body) for s in secrets)


def signed_headers(
    secrets: Sequence[str], event_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one try of an event: its id (the same on every try), this try's time and
    its signatures."""
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(secrets, event_id, timestamp, body),
        "User-Agent": "OmniPost status events",
    }


def event_body(kind: str, timestamp: str, data: Mapping[str, Any]) -> bytes:
    """The JSON body: ``type``, ``timestamp`` and ``data``; an error sentence too long for
    ``BODY_MOST_BYTES`` is cut, so that a body never exceeds it."""
    fields = dict(data)
    body = _dumps(kind, timestamp, fields)
    if len(body) > BODY_MOST_BYTES and isinstance(fields.get("error"), str):
        over = len(body) - BODY_MOST_BYTES
        error = fields["error"]
        fields["error"] = error[: max(0, len(error) - over - 3)] + "..."
        body = _dumps(kind, timestamp, fields)
    return body


def _dumps(kind: str, timestamp: str, data: Mapping[str, Any]) -> bytes:
    payload = {"type": kind, "timestamp": timestamp, "data": data}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def check_endpoint_url(url: str, *, allow_private: bool) -> str:
    """``url`` if an endpoint may have it: ``https`` (or ``http`` with ``allow_private``, for
    loopback and local setups), a host, no credentials in it, and, when the host is an address,
    not a private one unless allowed. ConfigError otherwise, in one sentence."""
    text = url.strip()
    if len(text) > 2000:
        raise ConfigError("an endpoint's URL is at most 2,000 characters.")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{text!r} is not a URL: {exc}.") from None
    del port
    schemes = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in schemes:
        if parts.scheme == "http":
            raise ConfigError(
                "an endpoint's URL must be https (plain http only for an endpoint allowed "
                "private addresses, --allow-private)."
            )
        raise ConfigError(f"{text!r} is not an https URL.")
    if not parts.hostname:
        raise ConfigError(f"{text!r} names no host.")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("an endpoint's URL must not hold credentials; events are signed.")
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        if parts.hostname.lower() in ("localhost", "localhost.localdomain") and not allow_private:
            raise ConfigError(_private_sentence(parts.hostname)) from None
        return text
    why = refused_address(str(address), allow_private=allow_private)
    if why:
        raise ConfigError(why)
    return text


def refused_address(address: str, *, allow_private: bool) -> str:
    """Why an endpoint may not connect to ``address`` (after DNS), or ``""`` when it may:
    link-local (169.254.169.254, the cloud's metadata service, first), private, loopback,
    unspecified, multicast and reserved ranges are refused unless allowed."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if allow_private:
        return ""
    if ip.is_link_local:
        return _private_sentence(str(ip), "link-local")
    if ip.is_loopback:
        return _private_sentence(str(ip), "loopback")
    if ip.is_private or ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return _private_sentence(str(ip), "private")
    return ""


def _private_sentence(address: str, kind: str = "private") -> str:
    return (
        f"{address} is a {kind} address; endpoints reach public addresses only unless the "
        "operator allows private ones for the endpoint (omnipost webhook add --allow-private)."
    )
