"""Android and web push through Firebase Cloud Messaging's HTTP v1 API (httpx).

Options
    ``project_id`` (required: the Firebase project), ``base_url`` (default
    ``https://fcm.googleapis.com``), ``token_url`` (default Google's OAuth 2.0 token endpoint),
    ``timeout_s`` (default 10). Both URLs may point at a gateway or a test server.

Secret
    ``service_account``: the service account's JSON key file, whole (its ``client_email`` and
    ``private_key`` are used). Masked everywhere; its key is read when the provider is built, so a
    key that cannot be read is refused then, in one sentence that does not quote it.

Authorization (OAuth 2.0 for service accounts, RFC 7523)
    An RS256 JWT signed with the private key (``iss`` the client email, ``scope``
    ``https://www.googleapis.com/auth/firebase.messaging``, ``aud`` the token URL, an hour long)
    is exchanged at ``token_url`` for an access token, kept until a minute before it expires and
    fetched again once when a send is answered 401.

Request
    ``POST {base_url}/v1/projects/{project_id}/messages:send`` with ``{"message": {"token":
    RECIPIENT, "notification": ..., "data": ...}}``: the payload's ``notification`` (or its
    ``title`` and ``body``) and ``data`` (an object of strings); for a notification with a
    deadline, ``android.ttl`` (the seconds left of it) and ``apns.headers.apns-expiration``
    (the deadline, unix seconds).

Answers (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode)
    200 delivered, naming the message. ``UNREGISTERED`` (404) permanent and the token suppressed;
    ``INVALID_ARGUMENT`` (400) permanent; 429 / ``QUOTA_EXCEEDED`` throttled after ``Retry-After``;
    ``UNAVAILABLE`` and ``INTERNAL`` (5xx) transient and the provider's fault; 401 after a fresh
    token, 403 (``SENDER_ID_MISMATCH``, a key without the right) and a token endpoint that refuses
    or does not answer unavailable (the circuit holds the notifications); timeouts and connection
    errors unavailable; any other 4xx permanent. A detail never holds the device token or a
    credential.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from engine.core.clock import Clock, SystemClock
from engine.core.domain import Message, SendResult
from engine.core.errors import ConfigError
from engine.providers._http import OwnedClient, http_client, json_object, request_failed
from engine.providers._options import redact
from engine.providers.base import ProviderConfig
from engine.providers.schema import OptionSpec, ProviderKind
from engine.providers.webhook import parse_retry_after, user_agent

if TYPE_CHECKING:
    import httpx
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

__all__ = ["KIND", "SPEC", "FcmProvider", "jwt_assertion"]

KIND = "fcm"
DEFAULT_BASE_URL = "https://fcm.googleapis.com"
DEFAULT_TOKEN_URL = "https://oauth2.googleapis.com/token"  # noqa: S105 - a URL, not a secret
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_S = 3600  # how long a signed assertion is good for (Google's most)
EARLY_S = 60.0  # a token is fetched again this long before it expires


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_assertion(key: RSAPrivateKey, issuer: str, audience: str, now: float) -> str:
    """An RS256 JWT for the OAuth 2.0 JWT bearer grant (RFC 7523)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    header = {"alg": "RS256", "typ": "JWT"}
    claims = {
        "iss": issuer,
        "scope": SCOPE,
        "aud": audience,
        "iat": int(now),
        "exp": int(now) + ASSERTION_S,
    }
    signing_input = ".".join(
        _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def _read_account(config: ProviderConfig, text: str) -> tuple[str, RSAPrivateKey]:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    where = f"provider {config.name!r}: secret 'service_account'"
    try:
        account = json.loads(text)
    except ValueError:
        raise ConfigError(f"{where} is not a service account's JSON key file.") from None
    email = account.get("client_email") if isinstance(account, dict) else None
    pem = account.get("private_key") if isinstance(account, dict) else None
    if not isinstance(email, str) or not isinstance(pem, str):
        raise ConfigError(f"{where} lacks client_email or private_key.")
    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{where} holds a private key that cannot be read.") from None
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(f"{where} holds a key that is not RSA.")
    return email, key


class FcmProvider:
    """Sends each message as one FCM message. Pass ``client`` to share or mock the client."""

    def __init__(
        self,
        name: str,
        project_id: str,
        client_email: str,
        key: RSAPrivateKey,
        *,
        base_url: str = DEFAULT_BASE_URL,
        token_url: str = DEFAULT_TOKEN_URL,
        timeout_s: float = 10.0,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.project_id = project_id
        self.client_email = client_email
        self._key = key
        self.url = f"{base_url.rstrip('/')}/v1/projects/{project_id}/messages:send"
        self.token_url = token_url
        self.timeout_s = timeout_s
        self._clients = OwnedClient(client, self._new_client)
        self._clock = clock or SystemClock()
        self._token: str | None = None
        self._token_until = 0.0
        self._token_lock: asyncio.Lock | None = None  # made in the loop of the first send
        self.tokens_fetched = 0

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        opts = SPEC.read(config)
        email, key = _read_account(config, opts.text("service_account"))
        for name in ("base_url", "token_url"):
            parts = urlsplit(opts.text(name))
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise opts.fail(name, "must be an http:// or https:// address with a host name")
        return cls(
            config.name,
            opts.text("project_id"),
            email,
            key,
            base_url=opts.text("base_url"),
            token_url=opts.text("token_url"),
            timeout_s=opts.number("timeout_s"),
        )

    def _new_client(self) -> httpx.AsyncClient:
        return http_client(self.timeout_s)

    async def _access_token(self, *, fresh: bool = False) -> str | SendResult:
        """A live access token, or the outcome that stands for not getting one. One fetch at a
        time: the sends that find no token wait for the one fetch, and share its token."""
        stale = self._token
        if not fresh and stale is not None and self._clock.wall() < self._token_until:
            return stale
        if self._token_lock is None:
            self._token_lock = asyncio.Lock()
        async with self._token_lock:
            if self._token is not None and self._token != stale:
                return self._token  # fetched by another send while this one waited
            if not fresh and self._token is not None and self._clock.wall() < self._token_until:
                return self._token
            return await self._fetch_token()

    async def _fetch_token(self) -> str | SendResult:
        now = self._clock.wall()
        import httpx

        assertion = jwt_assertion(self._key, self.client_email, self.token_url, now)
        try:
            response = await self._clients.get().post(
                self.token_url,
                data={"grant_type": GRANT, "assertion": assertion},
                headers={"User-Agent": user_agent()},
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            return SendResult.unavailable(f"the token endpoint failed: {type(exc).__name__}")
        answer = json_object(response)
        token, lifetime = answer.get("access_token"), answer.get("expires_in", 3600)
        if response.status_code != 200 or not isinstance(token, str):
            error = answer.get("error_description") or answer.get("error") or ""
            said = f": {str(error)[:200]}" if error else ""
            return SendResult.unavailable(
                f"the token endpoint answered {response.status_code}{said}"
            )
        self.tokens_fetched += 1
        self._token = token
        lifetime_s = float(lifetime) if isinstance(lifetime, int | float) else 3600.0
        self._token_until = now + max(0.0, lifetime_s - EARLY_S)
        return token

    def body(self, message: Message) -> dict[str, Any] | str:
        """The request's JSON, or a sentence saying why the message cannot be sent."""
        payload = message.payload
        fcm: dict[str, Any] = {"token": message.recipient}
        notification = payload.get("notification")
        if notification is None and ("title" in payload or "body" in payload):
            notification = {k: payload[k] for k in ("title", "body") if k in payload}
        if notification is not None:
            if not isinstance(notification, dict):
                return "the payload's notification must be an object"
            fcm["notification"] = notification
        data = payload.get("data")
        if data is not None:
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                return "the payload's data must be an object of strings"
            fcm["data"] = data
        if "notification" not in fcm and "data" not in fcm:
            return "the payload has neither a notification (title, body) nor data"
        if message.expires_at is not None:  # what is left of its deadline, for both networks
            fcm["android"] = {"ttl": f"{int(message.ttl_s or 0)}s"}
            fcm["apns"] = {"headers": {"apns-expiration": str(int(message.expires_at))}}
        return {"message": fcm}

    async def send(self, message: Message) -> SendResult:
        body = self.body(message)
        if isinstance(body, str):
            return SendResult.permanent(body)
        first = await self._post(message, body, fresh=False)
        if isinstance(first, SendResult):
            return first
        if first.status_code == 401:  # the token was revoked or expired early: once more
            again = await self._post(message, body, fresh=True)
            if isinstance(again, SendResult):
                return again
            first = again
        return self._result(first, message.recipient)

    async def _post(
        self, message: Message, body: dict[str, Any], *, fresh: bool
    ) -> httpx.Response | SendResult:
        import httpx

        token = await self._access_token(fresh=fresh)
        if isinstance(token, SendResult):
            return token
        try:
            return await self._clients.get().post(
                self.url,
                json=body,
                headers={"Authorization": f"Bearer {token}", "User-Agent": user_agent()},
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            return request_failed(exc, message.recipient, "FCM", self.timeout_s)

    def _result(self, response: httpx.Response, recipient: str) -> SendResult:
        status = response.status_code
        answer = json_object(response)
        if 200 <= status < 300:
            name = answer.get("name")
            return SendResult.delivered(
                f"FCM message {str(name).rsplit('/', 1)[-1]}" if name else "sent"
            )
        found = answer.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        code = _fcm_code(error) or str(error.get("status") or "")
        said = redact(str(error.get("message") or ""), recipient)
        label = f"HTTP {status}" + (f" {code}" if code else "") + (f": {said}" if said else "")
        if status == 429 or code in ("QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED"):
            retry = parse_retry_after(response.headers.get("Retry-After"), self._clock.wall())
            return SendResult.throttled(retry, label)
        if code == "UNREGISTERED":  # the app was uninstalled or the token expired: for good
            return SendResult.gone(label)
        if code in ("INVALID_ARGUMENT", "NOT_FOUND"):
            return SendResult.permanent(label)
        if status in (401, 403) or code in ("SENDER_ID_MISMATCH", "THIRD_PARTY_AUTH_ERROR"):
            return SendResult.unavailable(label)
        if status >= 500 or code in ("UNAVAILABLE", "INTERNAL"):
            return SendResult.transient(label, provider_fault=True)
        return SendResult.permanent(label)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def __repr__(self) -> str:
        return f"FcmProvider(name={self.name!r}, project_id={self.project_id!r})"


def _fcm_code(error: dict[str, Any]) -> str | None:
    """The ``errorCode`` of an FCM error's ``details`` (``UNREGISTERED``), if one is given."""
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and isinstance(detail.get("errorCode"), str):
            return str(detail["errorCode"])
    return None


OPTIONS = (
    OptionSpec("project_id", required=True, help="the Firebase project's id"),
    OptionSpec("base_url", default=DEFAULT_BASE_URL, help="FCM's API, or a gateway to it"),
    OptionSpec("token_url", default=DEFAULT_TOKEN_URL, help="where access tokens come from"),
    OptionSpec("timeout_s", "number", 10.0, above_low=True, high=300, help="for each request"),
    OptionSpec(
        "service_account", secret=True, required=True, help="the service account's JSON key file"
    ),
)
SPEC = ProviderKind(
    KIND, "sends push through Firebase Cloud Messaging (HTTP v1)", OPTIONS, FcmProvider.from_config
)
