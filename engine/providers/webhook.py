"""A provider that POSTs each notification as JSON to an HTTP(S) endpoint (httpx).

Options
    ``url`` (required, http or https, no user:password part), ``timeout_s`` (default 10, the
    whole request), and extra headers as ``header.NAME`` = ``VALUE`` (``header.X-Team`` =
    ``ops``). A header that carries a credential goes in the secrets instead, under the same
    ``header.NAME`` key (``header.Authorization`` = ``Bearer ...``): it is sent the same way and
    masked everywhere. The headers below are set by OmniPost and cannot be overridden.

Secret
    ``signing_key``: when set, every request is signed (see below).

Request
    ``POST url`` with body ``{"id", "tenant", "recipient", "payload", "attempt"}`` (compact
    JSON, UTF-8) and headers ``Content-Type: application/json``, ``Idempotency-Key`` (the
    notification's key: the same on every redelivery), ``User-Agent: OmniPost/<version>``,
    for a notification with a deadline ``OmniPost-Expires-At`` (RFC 3339 in UTC: a receiver may
    drop what arrives past it) and, when signed, ``OmniPost-Signature``. ``attempt`` is the
    delivery attempt as the retry policy counts it: 1 at first, one more after each transient
    failure, never above the notification's ``max_attempts``. Throttled sends and redeliveries
    after a lost lease do not count, so two requests may carry the same attempt; the
    ``Idempotency-Key`` is the same.

Signature (the scheme Stripe uses)
    ``OmniPost-Signature: t=<unix seconds>,v1=<hex>`` where ``<hex>`` is the HMAC-SHA256, keyed
    with the UTF-8 signing key, of ``f"{t}."`` followed by the exact body bytes. A receiver
    recomputes it over the raw body it got, compares in constant time and rejects timestamps
    too far from its own clock (replays). ``verify_signature`` does all of that; a receiver may
    accept several ``v1=`` entries, so keys can be rotated.

Answers
    2xx delivered. 429 throttled, after ``Retry-After`` (seconds or an HTTP date; 1 s when
    absent or unreadable; at most one hour). The endpoint's failures, not the message's, count
    toward the provider's circuit breaker: timeouts, refused or reset connections, DNS and TLS
    errors, and 401, 403 and 407 (the credentials are wrong for every message alike) are
    UNAVAILABLE, and spend no attempt; 5xx and 408 are transient with ``provider_fault`` (the
    request reached the endpoint: the attempt is spent, and a run of them opens the circuit).
    Any other status (including redirects, which are not followed) permanent. A detail string
    never contains the recipient, even when the server echoes it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from functools import cache
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from engine.core.clock import Clock, SystemClock
from engine.core.domain import Message, SendResult
from engine.core.errors import ConfigError
from engine.core.present import rfc3339
from engine.providers._http import OwnedClient, http_client
from engine.providers._options import Options, redact
from engine.providers.base import ProviderConfig

if TYPE_CHECKING:  # imported when a webhook is first built: a command that sends none
    import httpx  # (every command but the worker's) starts without it
from engine.providers.schema import OptionSpec, ProviderKind

__all__ = [
    "KIND",
    "SIGNATURE_HEADER",
    "SPEC",
    "WebhookProvider",
    "parse_retry_after",
    "sign",
    "verify_signature",
]

KIND = "webhook"
SIGNATURE_HEADER = "OmniPost-Signature"
EXPIRES_HEADER = "OmniPost-Expires-At"  # the notification's deadline, RFC 3339 in UTC
DEFAULT_RETRY_AFTER_S = 1.0
MAX_RETRY_AFTER_S = 3600.0
HEADER_PREFIX = "header."


@cache
def user_agent() -> str:
    """``OmniPost/VERSION``, read from the package's metadata once (not at import: the
    metadata reader is slow to import, and most commands build no webhook)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"OmniPost/{version('omnipost')}"
    except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "OmniPost/0"


def __getattr__(name: str) -> str:
    if name == "USER_AGENT":  # what ``user_agent()`` says, as a module constant
        return user_agent()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_RESERVED = frozenset(
    {"content-type", "content-length", "host", "idempotency-key", "user-agent"}
    | {SIGNATURE_HEADER.lower(), "transfer-encoding", "connection"}
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``OmniPost-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes | str,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """True when ``header`` (an ``OmniPost-Signature`` value) signs ``body`` with ``secret``
    and its timestamp is within ``tolerance_s`` of ``now`` (Unix seconds; the system clock when
    None). Pass the raw body bytes as received, before any JSON parsing. Never raises.
    """
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    now = SystemClock().wall() if now is None else now
    if abs(now - timestamp) > tolerance_s:
        return False
    raw = body.encode() if isinstance(body, str) else body
    expected = sign(secret, raw, timestamp).rpartition("v1=")[2]
    return any(hmac.compare_digest(expected, candidate) for candidate in candidates)


def parse_retry_after(value: str | None, now: float) -> float:
    """Seconds to wait from a ``Retry-After`` value (delay seconds or an HTTP date) at ``now``
    (Unix seconds): 1.0 when absent or unreadable, never below 0 nor above one hour."""
    if value is None or not value.strip():
        return DEFAULT_RETRY_AFTER_S
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return DEFAULT_RETRY_AFTER_S
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if math.isnan(seconds):
        return DEFAULT_RETRY_AFTER_S
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _extra_headers(opts: Options) -> dict[str, str]:
    """``header.NAME`` options and secrets, checked; secret values never appear in errors."""
    headers: dict[str, str] = {}
    sources = (("option", opts.config.options), ("secret", opts.config.secrets))
    for what, mapping in sources:
        for key, value in mapping.items():
            if not key.startswith(HEADER_PREFIX):
                continue
            name = key.removeprefix(HEADER_PREFIX)
            where = f"provider {opts.config.name!r}: {what} {key!r}"
            if not _TOKEN.match(name):
                raise ConfigError(f"{where} does not name a valid HTTP header.")
            if name.lower() in _RESERVED:
                raise ConfigError(f"{where} names a header that OmniPost sets itself.")
            if not value.isascii() or not value.isprintable():
                raise ConfigError(f"{where} must have a value of printable ASCII on one line.")
            headers[name] = value
    return headers


class WebhookProvider:
    """POSTs messages to ``url``. Pass ``client`` to share or mock the HTTP client (then the
    caller closes it); otherwise the provider opens one pooled, TLS-verifying client on its
    first send and closes it in ``aclose``."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        signing_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.timeout_s = timeout_s
        self._headers = dict(headers or {})
        self._signing_key = signing_key or None
        self._clients = OwnedClient(client, self._new_client)
        self._clock = clock or SystemClock()

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """Build from options and secrets; raises ``ConfigError`` naming the first bad one."""
        opts = SPEC.read(config)
        url = opts.text("url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise opts.fail("url", "must be an http:// or https:// address with a host name")
        if parts.username is not None or parts.password is not None:
            raise opts.fail("url", "must not hold a user name or password; use a secret header")
        return cls(
            config.name,
            url,
            timeout_s=opts.number("timeout_s"),
            headers=_extra_headers(Options(config)),
            signing_key=opts.text("signing_key") or None,
        )

    def _new_client(self) -> httpx.AsyncClient:
        return http_client(self.timeout_s)

    @staticmethod
    def encode(message: Message) -> bytes:
        """The request body. Raises ``TypeError`` or ``ValueError`` when it is not JSON."""
        body = {
            "id": message.notification_id,
            "tenant": message.tenant,
            "recipient": message.recipient,
            "payload": message.payload,
            "attempt": message.delivery_attempt,
        }
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()

    async def send(self, message: Message) -> SendResult:
        """POST ``message`` and translate the answer into an outcome. Never raises for a
        delivery problem."""
        key = message.idempotency_key
        if not key.isascii() or not key.isprintable():
            return SendResult.permanent("the idempotency key cannot be sent in an HTTP header")
        try:
            body = self.encode(message)
        except (TypeError, ValueError) as exc:
            return SendResult.permanent(f"payload is not JSON: {type(exc).__name__}")
        now = self._clock.wall()
        headers = {
            **self._headers,
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "User-Agent": user_agent(),
        }
        if message.expires_at is not None:  # the receiver may drop what comes too late
            headers[EXPIRES_HEADER] = rfc3339(message.expires_at, "milliseconds")
        if self._signing_key:
            headers[SIGNATURE_HEADER] = sign(self._signing_key, body, int(now))
        import httpx  # loaded on the first send, as the client is (engine/providers/_http.py)

        try:
            response = await self._clients.get().post(
                self.url, content=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.TimeoutException:
            return SendResult.unavailable(f"no answer within {self.timeout_s:g} s")
        except httpx.TransportError as exc:  # no connection, TLS, DNS, a broken answer
            reason = redact(str(exc), message.recipient) or "no reason given"
            return SendResult.unavailable(f"{type(exc).__name__}: {reason}")
        except httpx.HTTPError as exc:
            reason = redact(str(exc), message.recipient) or "no reason given"
            return SendResult.transient(f"{type(exc).__name__}: {reason}")
        return self._result(response, message.recipient, now)

    @staticmethod
    def _result(response: httpx.Response, recipient: str, now: float) -> SendResult:
        status = response.status_code
        label = f"HTTP {status} {response.reason_phrase}".rstrip()
        if 200 <= status < 300:
            return SendResult.delivered(label)
        if status == 429:
            retry_after_s = parse_retry_after(response.headers.get("Retry-After"), now)
            return SendResult.throttled(retry_after_s, label)
        if 300 <= status < 400:
            return SendResult.permanent(f"{label}: the endpoint redirects; configure its final url")
        said = redact(response.content[:1000].decode("utf-8", "replace"), recipient)
        detail = f"{label}: {said}" if said else label
        if status >= 500 or status == 408:
            return SendResult.transient(detail, provider_fault=True)
        if status in (401, 403, 407):
            return SendResult.unavailable(detail)
        return SendResult.permanent(detail)

    async def aclose(self) -> None:
        """Close the client if the provider opened it; safe to call twice."""
        await self._clients.aclose()

    def __repr__(self) -> str:
        parts = urlsplit(self.url)
        shown = f"{parts.scheme}://{parts.netloc}{parts.path}"  # the query may hold a token
        return (
            f"WebhookProvider(name={self.name!r}, url={shown!r}, timeout_s={self.timeout_s:g}, "
            f"headers={sorted(self._headers)}, signed={self._signing_key is not None})"
        )


OPTIONS = (
    OptionSpec("url", required=True, help="the http(s) address to POST to; no user:password"),
    OptionSpec("timeout_s", "number", 10.0, above_low=True, high=300, help="for the whole request"),
    OptionSpec(f"{HEADER_PREFIX}NAME", prefix=True, help="an extra header NAME sent as given"),
    OptionSpec("signing_key", secret=True, help="signs each request (OmniPost-Signature)"),
    OptionSpec(
        f"{HEADER_PREFIX}NAME",
        secret=True,
        prefix=True,
        help="a header that carries a credential (Authorization), masked everywhere",
    ),
)
SPEC = ProviderKind(KIND, "POSTs each notification as JSON", OPTIONS, WebhookProvider.from_config)
