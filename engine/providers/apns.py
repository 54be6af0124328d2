"""iOS push through the Apple Push Notification service, over HTTP/2 (httpx with h2).

Options
    ``team_id`` and ``key_id`` (required: the signing key's team and id, 10 characters each),
    ``topic`` (required: the app's bundle id), ``environment`` (``production`` or ``sandbox``,
    choosing Apple's host), ``base_url`` (instead of Apple's host: a gateway or a test server),
    ``ca_file`` (a PEM bundle to trust instead of the system's, for such a server),
    ``push_type`` (default ``alert``), ``priority`` (10 or 5; default 10), ``expiration_s``
    (seconds a message may wait at Apple for an offline device; default 0: deliver now or never),
    ``timeout_s`` (default 10).

Secret
    ``signing_key``: the token-based authentication key, the ``.p8`` file's PEM text.

Authorization (token-based)
    An ES256 JWT (header ``kid`` the key id, claims ``iss`` the team and ``iat``), made again
    after 50 minutes (Apple refuses one older than an hour, and one renewed more often than every
    20 minutes), sent as ``authorization: bearer``.

Request
    ``POST {host}/3/device/{recipient}`` with the payload as the JSON body (``{"aps": {...}}``:
    a payload without ``aps`` gets ``{"aps": {"alert": {"title", "body"}}}`` from its ``title``
    and ``body``), and headers ``apns-topic``, ``apns-push-type``, ``apns-priority``,
    ``apns-expiration`` (the notification's deadline when it has one, else ``expiration_s``
    from now), ``apns-collapse-id`` (the payload's ``collapse_id``, when given) and
    ``apns-id``, a UUID derived from the notification's idempotency key (so a redelivery carries
    the same id).

Answers (Apple's "Handling notification responses from APNs")
    200 delivered. 410 ``Unregistered`` permanent and the token suppressed; 400 ``BadDeviceToken`` /
    ``DeviceTokenNotForTopic`` permanent; 429 ``TooManyRequests`` throttled; 403 (a bad key,
    ``InvalidProviderToken``, a topic the key may not use) unavailable, and the JWT is made again;
    500 and 503 transient and the provider's fault; timeouts and connection errors unavailable;
    other 4xx permanent. A detail never holds the device token or the key.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from engine.core.clock import Clock, SystemClock
from engine.core.domain import Message, SendResult
from engine.core.errors import ConfigError
from engine.providers._http import OwnedClient, request_failed
from engine.providers.base import ProviderConfig
from engine.providers.schema import OptionSpec, ProviderKind
from engine.providers.webhook import parse_retry_after

if TYPE_CHECKING:
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

__all__ = ["KIND", "SPEC", "ApnsProvider", "es256_token"]

KIND = "apns"
HOSTS = {
    "production": "https://api.push.apple.com",
    "sandbox": "https://api.sandbox.push.apple.com",
}
TOKEN_REUSE_S = 50 * 60.0  # a JWT is made again after this long
_NAMESPACE = uuid.UUID("5e0b3a70-3c1e-4b8f-9d5a-0c1f2e3d4a5b")  # apns-id from idempotency keys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def es256_token(key: EllipticCurvePrivateKey, key_id: str, team_id: str, now: float) -> str:
    """Apple's provider authentication token: an ES256 JWT (the signature as r || s)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    header = _b64(json.dumps({"alg": "ES256", "kid": key_id}, separators=(",", ":")).encode())
    claims = _b64(json.dumps({"iss": team_id, "iat": int(now)}, separators=(",", ":")).encode())
    der = key.sign(f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return f"{header}.{claims}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _read_key(config: ProviderConfig, pem: str) -> EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    where = f"provider {config.name!r}: secret 'signing_key'"
    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{where} is not a PEM private key (the .p8 file's text).") from None
    if not isinstance(key, EllipticCurvePrivateKey):
        raise ConfigError(f"{where} is not an elliptic-curve (P-256) key.")
    return key


class ApnsProvider:
    """Sends each message as one push over HTTP/2."""

    def __init__(
        self,
        name: str,
        team_id: str,
        key_id: str,
        key: EllipticCurvePrivateKey,
        topic: str,
        *,
        base_url: str = HOSTS["production"],
        ca_file: str | None = None,
        push_type: str = "alert",
        priority: int = 10,
        expiration_s: int = 0,
        timeout_s: float = 10.0,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.team_id = team_id
        self.key_id = key_id
        self._key = key
        self.topic = topic
        self.base_url = base_url.rstrip("/")
        self.ca_file = ca_file
        self.push_type = push_type
        self.priority = priority
        self.expiration_s = expiration_s
        self.timeout_s = timeout_s
        self._clients = OwnedClient(client, self._new_client)
        self._clock = clock or SystemClock()
        self._token: str | None = None
        self._token_at = 0.0
        self.tokens_made = 0

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        opts = SPEC.read(config)
        key = _read_key(config, opts.text("signing_key"))
        for name in ("team_id", "key_id"):
            value = opts.text(name)
            if len(value) != 10 or not value.isalnum():
                raise opts.fail(name, "must be the 10 letters and digits Apple gives")
        base_url = opts.text("base_url") or HOSTS[opts.text("environment")]
        parts = urlsplit(base_url)
        if parts.scheme != "https" or not parts.hostname:
            raise opts.fail("base_url", "must be an https:// address (APNs speaks HTTP/2 over TLS)")
        ca_file = opts.text("ca_file") or None
        if ca_file is not None:
            try:
                with open(ca_file, "rb"):
                    pass
            except OSError:
                raise opts.fail("ca_file", "names a file that cannot be read") from None
        return cls(
            config.name,
            opts.text("team_id"),
            opts.text("key_id"),
            key,
            opts.text("topic"),
            base_url=base_url,
            ca_file=ca_file,
            push_type=opts.text("push_type"),
            priority=opts.integer("priority") or 10,
            expiration_s=opts.integer("expiration_s") or 0,
            timeout_s=opts.number("timeout_s"),
        )

    def _new_client(self) -> httpx.AsyncClient:
        """HTTP/2 (h2), verifying Apple's certificate, or ``ca_file``'s."""
        import ssl

        import httpx

        verify = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True
        return httpx.AsyncClient(
            http2=True, verify=verify, follow_redirects=False, timeout=self.timeout_s
        )

    def _bearer(self) -> str:
        now = self._clock.wall()
        if self._token is None or now - self._token_at >= TOKEN_REUSE_S:
            self._token = es256_token(self._key, self.key_id, self.team_id, now)
            self._token_at = now
            self.tokens_made += 1
        return self._token

    def request(self, message: Message) -> tuple[dict[str, str], bytes] | str:
        """The headers and body of ``message``, or a sentence saying why it cannot be sent."""
        payload = dict(message.payload)
        collapse = payload.pop("collapse_id", None)
        if "aps" not in payload:
            alert = {k: payload.pop(k) for k in ("title", "body") if k in payload}
            if not alert:
                return "the payload has neither aps nor a title or body"
            payload = {"aps": {"alert": alert}, **payload}
        try:
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return "the payload is not JSON"
        headers = {
            "apns-topic": self.topic,
            "apns-push-type": self.push_type,
            "apns-priority": str(self.priority),
            "apns-expiration": self._expiration(message),
            "apns-id": str(uuid.uuid5(_NAMESPACE, message.idempotency_key)),
        }
        if collapse is not None:
            headers["apns-collapse-id"] = str(collapse)[:64]
        return headers, body

    def _expiration(self, message: Message) -> str:
        """``apns-expiration``: the notification's deadline when it has one, else the kind's
        ``expiration_s`` from now (0: delivered now or never)."""
        if message.expires_at is not None:
            return str(int(message.expires_at))
        return str(int(self._clock.wall()) + self.expiration_s) if self.expiration_s else "0"

    async def send(self, message: Message) -> SendResult:
        built = self.request(message)
        if isinstance(built, str):
            return SendResult.permanent(built)
        headers, body = built
        import httpx

        headers["authorization"] = f"bearer {self._bearer()}"
        url = f"{self.base_url}/3/device/{message.recipient}"
        try:
            response = await self._clients.get().post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return request_failed(exc, message.recipient, "APNs", self.timeout_s)
        return self._result(response)

    def _result(self, response: httpx.Response) -> SendResult:
        status = response.status_code
        try:
            reason = str(response.json().get("reason") or "")
        except (ValueError, AttributeError):
            reason = ""
        label = f"HTTP {status}" + (f" {reason}" if reason else "")
        if status == 200:
            return SendResult.delivered(f"apns-id {response.headers.get('apns-id', '')}".strip())
        if status == 429:
            return SendResult.throttled(
                parse_retry_after(response.headers.get("retry-after"), self._clock.wall()), label
            )
        if status == 403:
            self._token = None  # a refused token is made again for the next send
            return SendResult.unavailable(label)
        if status >= 500:
            return SendResult.transient(label, provider_fault=True)
        if status == 410:  # Unregistered: Apple asks senders to stop using the token
            return SendResult.gone(label)
        return SendResult.permanent(label)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def __repr__(self) -> str:
        return f"ApnsProvider(name={self.name!r}, topic={self.topic!r}, base_url={self.base_url!r})"


OPTIONS = (
    OptionSpec("team_id", required=True, help="the team the signing key belongs to"),
    OptionSpec("key_id", required=True, help="the signing key's id"),
    OptionSpec("topic", required=True, help="the app's bundle id"),
    OptionSpec(
        "environment",
        "choice",
        "production",
        choices=("production", "sandbox"),
        help="which of Apple's hosts",
    ),
    OptionSpec("base_url", default="", help="instead of Apple's host: a gateway or a test server"),
    OptionSpec("ca_file", default="", help="a PEM bundle to trust instead of the system's"),
    OptionSpec("push_type", default="alert", help="apns-push-type: alert, background, voip..."),
    OptionSpec(
        "priority", "integer", 10, low=1, high=10, help="apns-priority: 10 now, 5 when convenient"
    ),
    OptionSpec(
        "expiration_s", "integer", 0, low=0, high=30 * 86400, help="how long Apple may hold it"
    ),
    OptionSpec("timeout_s", "number", 10.0, above_low=True, high=300, help="for each request"),
    OptionSpec("signing_key", secret=True, required=True, help="the .p8 key's PEM text"),
)
SPEC = ProviderKind(KIND, "sends iOS push through APNs (HTTP/2)", OPTIONS, ApnsProvider.from_config)
