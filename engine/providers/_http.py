"""The HTTP client the HTTP providers (webhook, Twilio) open on their first send: pooled,
TLS-verifying, following no redirects. httpx is imported here, when a provider first sends, so
that a command that sends nothing starts without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.core.domain import SendResult
from engine.providers._options import redact

if TYPE_CHECKING:
    import httpx

__all__ = ["http_client", "json_object", "request_failed"]


def http_client(timeout_s: float) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(
        verify=True,
        follow_redirects=False,
        timeout=timeout_s,
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
    )


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object, or ``{}`` when it is not one (an HTML error page, nothing)."""
    try:
        found = response.json()
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def request_failed(exc: Exception, recipient: str, service: str, timeout_s: float) -> SendResult:
    """The outcome of a request httpx could not complete: no answer in time, no connection (TLS,
    DNS, a broken answer) unavailable; anything else transient. Never names the recipient."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return SendResult.unavailable(f"{service} gave no answer within {timeout_s:g} s")
    reason = redact(str(exc), recipient) or "no reason given"
    if isinstance(exc, httpx.TransportError):
        return SendResult.unavailable(f"{type(exc).__name__}: {reason}")
    return SendResult.transient(f"{type(exc).__name__}: {reason}")
