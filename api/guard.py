"""The door's frame, around every request before the routes see it (a plain ASGI middleware):
a body must be JSON (415) and at most ``max_body`` bytes (413, told from ``Content-Length``
or counted as it arrives), and every answer is counted and timed for the metrics by its route
template. Nothing here reads a key or a body's content."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from api.metrics import ApiMetrics
from api.problems import problem

__all__ = ["Guard"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_JSON = (b"application/json", b"application/problem+json")
# Refusals this frame makes (the routes count theirs: keys, scopes, limits, idempotency).
_REASONS = {413: "too_large", 415: "unsupported_type"}


class _TooLarge(HTTPException):
    """Raised from ``receive`` while the app reads a body: an HTTPException, so that the
    framework passes it on as it is (it turns other errors there into a 400)."""

    def __init__(self, max_body: int) -> None:
        super().__init__(413, f"the body is over the limit of {max_body:,} bytes.")


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media in _JSON or (media.startswith(b"application/") and media.endswith(b"+json"))


class Guard:
    def __init__(self, app: App, *, max_body: int, metrics: ApiMetrics) -> None:
        self.app = app
        self.max_body = max_body
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, sending)
                return
            await self.app(scope, self._counting(receive), sending)
        finally:
            if status[0] in _REASONS:
                self.metrics.refused(_REASONS[status[0]])
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            elapsed = time.perf_counter() - started
            self.metrics.answered(template, scope["method"], status[0], elapsed)

    def _refusal(self, scope: Scope) -> Any:
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        has_body = chunked or (length is not None and length.strip() not in (b"", b"0"))
        if not has_body:
            return None
        if length is not None:
            try:
                if int(length) > self.max_body:
                    return problem(413, _TooLarge(self.max_body).detail)
            except ValueError:
                return problem(400, "the Content-Length header is not a number.")
        if not _is_json(headers.get(b"content-type", b"")):
            detail = "the body must be JSON, sent with Content-Type: application/json."
            return problem(415, detail)
        return None

    def _counting(self, receive: Receive) -> Receive:
        seen = [0]

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > self.max_body:
                    raise _TooLarge(self.max_body)
            return message

        return counted
