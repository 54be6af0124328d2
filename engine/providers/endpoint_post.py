"""One POST of a status event to a tenant's endpoint, with the egress rules: the host is resolved
here, every address it resolves to is checked (``refused_address``: no link-local, private or
loopback address unless the endpoint is allowed them), and the connection goes to the address
that was checked (the name kept for the ``Host`` header and TLS), so a DNS answer that changes in
between cannot take it elsewhere. Connect within 5 s, the whole exchange within 15 s, no
redirect followed."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from engine.core.status_events import refused_address

if TYPE_CHECKING:
    import httpx

__all__ = ["CONNECT_S", "WHOLE_S", "EndpointPoster", "PostAnswer", "Resolve"]

CONNECT_S = 5.0
WHOLE_S = 15.0
# host, port -> the addresses it resolves to
Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class PostAnswer:
    """What came back: the status (None when no answer came), its ``Retry-After`` value, and
    for a failure one sentence saying why."""

    status: int | None
    retry_after: str | None = None
    error: str = ""
    refused: bool = False  # an address the endpoint may not reach (no connection was made)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EndpointPoster:
    """Posts events; owns its HTTP client (made on the first post)."""

    def __init__(
        self, *, client: httpx.AsyncClient | None = None, resolve: Resolve | None = None
    ) -> None:
        self._client = client
        self._owned = client is None
        self._resolve = resolve or _resolve

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                verify=True,
                follow_redirects=False,
                timeout=httpx.Timeout(WHOLE_S, connect=CONNECT_S),
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
        return self._client

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, allow_private: bool
    ) -> PostAnswer:
        import httpx

        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        try:
            addresses = [str(literal)] if literal else await self._resolve(host, port)
        except OSError as exc:
            return PostAnswer(None, error=f"{host} could not be resolved: {exc.strerror or exc}")
        if not addresses:
            return PostAnswer(None, error=f"{host} resolves to no address")
        for address in addresses:
            why = refused_address(address, allow_private=allow_private)
            if why:
                return PostAnswer(None, error=why, refused=True)
        address = addresses[0]
        shown = f"[{address}]" if ":" in address else address
        netloc = shown if parts.port is None else f"{shown}:{parts.port}"
        target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        sent = {**headers, "Host": parts.netloc, "Content-Type": "application/json"}
        extensions = {"sni_hostname": host} if parts.scheme == "https" and not literal else {}
        try:
            async with asyncio.timeout(WHOLE_S):
                response = await self._http().post(
                    target, content=body, headers=sent, extensions=extensions
                )
        except TimeoutError:
            return PostAnswer(None, error=f"no answer within {WHOLE_S:g} s")
        except httpx.HTTPError as exc:
            return PostAnswer(None, error=f"{type(exc).__name__}: {exc}"[:300])
        error = "" if 200 <= response.status_code < 300 else f"answered {response.status_code}"
        return PostAnswer(response.status_code, response.headers.get("retry-after"), error)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owned:
            await client.aclose()
