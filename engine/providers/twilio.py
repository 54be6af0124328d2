"""SMS through Twilio's Programmable Messaging API (httpx).

Options
    ``account_sid`` (required: ``AC`` and 32 hex digits), one of ``from`` (a number in E.164
    form, or an alphanumeric sender ID) and ``messaging_service_sid`` (``MG`` and 32 hex
    digits; Twilio then picks the sender), ``base_url`` (default ``https://api.twilio.com``:
    point it at a private gateway or a test server), ``timeout_s`` (default 10).

Secret
    ``auth_token``: the account's auth token (or an API key's secret), sent as HTTP Basic
    with the account SID. Masked everywhere, as every secret is.

Request
    ``POST {base_url}/2010-04-01/Accounts/{account_sid}/Messages.json``, form-encoded ``To``
    (the recipient), ``Body`` (the payload's ``body``: the text) and ``From`` or
    ``MessagingServiceSid``; for a notification with a deadline, ``ValidityPeriod``: the
    seconds left of it, within Twilio's 1 to 36,000.

Answers (https://www.twilio.com/docs/api/errors)
    201 (or any 2xx) delivered, naming the message SID. 429, or error 20429, throttled after
    ``Retry-After`` (1 s when absent). Errors 21211 (not a valid phone number), 21614 (not a
    mobile number) and 21408 / 21612 (the route is not allowed) permanent; 21610 (the recipient
    replied STOP to this sender) permanent and the recipient suppressed; 30036 (the validity
    period passed) expired.
    401 and 403 (bad credentials, a suspended account) unavailable: the circuit opens, no
    attempt is spent. 5xx transient and the provider's fault. Timeouts and connection errors
    unavailable. Any other 4xx permanent. A detail never holds the recipient or the token.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from engine.core.clock import Clock, SystemClock
from engine.core.domain import Message, SendResult
from engine.providers._http import OwnedClient, http_client, json_object, request_failed
from engine.providers._options import redact
from engine.providers.base import ProviderConfig
from engine.providers.schema import OptionSpec, ProviderKind
from engine.providers.webhook import parse_retry_after, user_agent

if TYPE_CHECKING:  # imported when a Twilio provider first sends
    import httpx

__all__ = ["KIND", "SPEC", "TwilioProvider"]

KIND = "twilio"
DEFAULT_BASE_URL = "https://api.twilio.com"
_ACCOUNT = re.compile(r"AC[0-9a-fA-F]{32}")
_SERVICE = re.compile(r"MG[0-9a-fA-F]{32}")
# Twilio's error codes (the JSON body's ``code``) and what they mean for a notification.
THROTTLED_CODES = frozenset({20429})
PERMANENT_CODES = frozenset({21211, 21614, 21408, 21612})
STOPPED = 21610  # the recipient replied STOP: permanent, and suppressed from then on
VALIDITY_EXPIRED = 30036  # its ValidityPeriod passed before Twilio could send it: expired
MOST_VALID_S = 36_000  # ValidityPeriod's bounds: 1 to 36,000 seconds


class TwilioProvider:
    """Sends each message as one SMS. Pass ``client`` to share or mock the HTTP client."""

    def __init__(
        self,
        name: str,
        account_sid: str,
        auth_token: str,
        *,
        sender: str | None = None,
        messaging_service_sid: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 10.0,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.account_sid = account_sid
        self._auth_token = auth_token
        self.sender = sender
        self.messaging_service_sid = messaging_service_sid
        self.url = f"{base_url.rstrip('/')}/2010-04-01/Accounts/{account_sid}/Messages.json"
        self.timeout_s = timeout_s
        self._clients = OwnedClient(client, self._new_client)
        self._clock = clock or SystemClock()

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        opts = SPEC.read(config)
        account = opts.text("account_sid")
        if not _ACCOUNT.fullmatch(account):
            raise opts.fail("account_sid", "must be AC followed by 32 hexadecimal digits")
        sender = opts.text("from") or None
        service = opts.text("messaging_service_sid") or None
        if (sender is None) == (service is None):
            raise opts.fail("from", "give either from or messaging_service_sid, not both or none")
        if service is not None and not _SERVICE.fullmatch(service):
            raise opts.fail("messaging_service_sid", "must be MG followed by 32 hexadecimal digits")
        base_url = opts.text("base_url")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise opts.fail("base_url", "must be an http:// or https:// address with a host name")
        return cls(
            config.name,
            account,
            opts.text("auth_token"),
            sender=sender,
            messaging_service_sid=service,
            base_url=base_url,
            timeout_s=opts.number("timeout_s"),
        )

    def _new_client(self) -> httpx.AsyncClient:
        return http_client(self.timeout_s)

    def form(self, message: Message) -> dict[str, str] | str:
        """The request's form fields, or a sentence saying why the message cannot be sent."""
        body = message.payload.get("body")
        if not isinstance(body, str) or not body:
            return "the payload has no body (the text of the SMS)"
        fields = {"To": message.recipient, "Body": body}
        if message.ttl_s is not None:  # what is left of its deadline, within Twilio's bounds
            fields["ValidityPeriod"] = str(min(MOST_VALID_S, max(1, int(message.ttl_s))))
        if self.messaging_service_sid:
            fields["MessagingServiceSid"] = self.messaging_service_sid
        else:
            assert self.sender is not None
            fields["From"] = self.sender
        return fields

    async def send(self, message: Message) -> SendResult:
        fields = self.form(message)
        if isinstance(fields, str):
            return SendResult.permanent(fields)
        import httpx

        now = self._clock.wall()
        try:
            response = await self._clients.get().post(
                self.url,
                data=fields,
                headers={"User-Agent": user_agent(), "Accept": "application/json"},
                auth=httpx.BasicAuth(self.account_sid, self._auth_token),
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            return request_failed(exc, message.recipient, "Twilio", self.timeout_s)
        return self._result(response, message.recipient, now)

    def _result(self, response: httpx.Response, recipient: str, now: float) -> SendResult:
        status = response.status_code
        answer = json_object(response)
        code = answer.get("code")
        said = redact(str(answer.get("message") or ""), recipient)
        said = said.replace(self._auth_token, "***") if self._auth_token else said
        label = (
            f"HTTP {status}" + (f" error {code}" if code else "") + (f": {said}" if said else "")
        )
        if 200 <= status < 300:
            sid = answer.get("sid")
            return SendResult.delivered(f"Twilio message {sid}" if sid else f"HTTP {status}")
        if status == 429 or code in THROTTLED_CODES:
            return SendResult.throttled(
                parse_retry_after(response.headers.get("Retry-After"), now), label
            )
        if code == STOPPED:
            return SendResult.gone(label)
        if code == VALIDITY_EXPIRED:
            return SendResult.expired(label)
        if code in PERMANENT_CODES:
            return SendResult.permanent(label)
        if status in (401, 403):
            return SendResult.unavailable(label)
        if status >= 500:
            return SendResult.transient(label, provider_fault=True)
        return SendResult.permanent(label)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def __repr__(self) -> str:
        sender = self.messaging_service_sid or self.sender
        return (
            f"TwilioProvider(name={self.name!r}, account_sid={self.account_sid!r}, from={sender!r})"
        )


OPTIONS = (
    OptionSpec("account_sid", required=True, help="the account's SID (AC...)"),
    OptionSpec("from", help="the sender: a number in E.164 form or an alphanumeric ID"),
    OptionSpec("messaging_service_sid", help="instead of from: a messaging service (MG...)"),
    OptionSpec("base_url", default=DEFAULT_BASE_URL, help="Twilio's API, or a gateway to it"),
    OptionSpec("timeout_s", "number", 10.0, above_low=True, high=300, help="for the whole request"),
    OptionSpec("auth_token", secret=True, required=True, help="the account's auth token"),
)
SPEC = ProviderKind(
    KIND, "sends SMS through Twilio's Messaging API", OPTIONS, TwilioProvider.from_config
)
