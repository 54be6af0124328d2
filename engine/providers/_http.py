"""What the HTTP providers share: the client they open on their first send (pooled,
TLS-verifying, following no redirects; APNs opens its own, for HTTP/2), who owns it
(``OwnedClient``), reading an answer's JSON and a failed request's outcome. httpx is imported
when a provider first sends, so that a command that sends nothing starts without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.core.domain import SendResult
from engine.providers._options import redact

if TYPE_CHECKING:
    import httpx

__all__ = ["OwnedClient", "http_client", "json_object", "request_failed"]


class OwnedClient:
    """An HTTP provider's client: the one it was given (a test's, or shared: its owner closes
    it), or one ``open`` makes on the first send, which ``aclose`` closes. Safe to close twice;
    a send after ``aclose`` opens a fresh one."""

    __slots__ = ("_client", "_open", "_owned")

    def __init__(self, client: httpx.AsyncClient | None, open: Callable[[], httpx.AsyncClient]):
        self._client = client
        self._open = open
        self._owned = client is None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = self._open()
            self._owned = True
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owned:
            await client.aclose()


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
