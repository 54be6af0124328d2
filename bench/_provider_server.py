"""What ``bench/providers.py`` sends to: one ASGI app answering as Twilio's Messaging API, Google's
token endpoint, FCM's send and APNs do when all is well (and as an application taking status
events, ``/events``), without checking anything (the tests
check; this only answers, as fast as it can). Served by uvicorn (HTTP/1.1) and by hypercorn
(HTTP/2 over TLS, for APNs)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

_TWILIO = json.dumps({"sid": "SM" + "0" * 32, "status": "queued"}).encode()
_TOKEN = json.dumps({"access_token": "ya29.bench", "expires_in": 3600}).encode()
_FCM = json.dumps({"name": "projects/bench/messages/0:1"}).encode()
_JSON = [(b"content-type", b"application/json")]


async def app(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    path: str = scope["path"]
    if path.endswith("/Messages.json"):
        status, body, headers = 201, _TWILIO, _JSON
    elif path == "/token":
        status, body, headers = 200, _TOKEN, _JSON
    elif path.endswith("/messages:send"):
        status, body, headers = 200, _FCM, _JSON
    elif path.startswith("/3/device/"):
        status, body, headers = 200, b"", [(b"apns-id", b"bench")]
    elif path == "/events":  # bench/status_events.py: a tenant's application taking its events
        status, body, headers = 204, b"", []
    else:
        status, body, headers = 404, b"", []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    """``python _provider_server.py PORT CERT KEY``: the app on HTTP/2 over TLS (hypercorn),
    its connections never closed for having served many requests."""
    import asyncio
    import sys

    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port, cert, key = sys.argv[1:4]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.certfile, config.keyfile = cert, key
    config.alpn_protocols = ["h2"]
    config.keep_alive_max_requests = 10**9
    config.h2_max_concurrent_streams = 1000
    config.loglevel = "ERROR"
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
