"""One POST of a status event to a tenant's endpoint, with the egress rules: the host is resolved
here, every address it resolves to is checked (``refused_address``: no link-local, private or
loopback address unless the endpoint is allowed them), and the connection goes to the address
that was checked (the name kept for the ``Host`` header and TLS), so a DNS answer that changes in
between cannot take it elsewhere. Connect within 5 s, the whole exchange within 15 s, no
redirect followed, at most 64 kB of an answer read.

HTTP/1.1 by h11 (the protocol library httpx itself stands on) over asyncio's streams, with
connections kept alive per (address, port, name): a post costs about a tenth of an httpx
client's on this machine (``bench/status_events.py``), which matters when every delivery of a
tenant's is told to its application while the dispatcher sends."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from engine.core.status_events import refused_address

__all__ = ["CONNECT_S", "WHOLE_S", "EndpointPoster", "PostAnswer", "Resolve"]

CONNECT_S = 5.0
WHOLE_S = 15.0
_MOST_ANSWER_BYTES = 65_536
# host, port -> the addresses it resolves to
Resolve = Callable[[str, int], Awaitable[list[str]]]
_Key = tuple[str, str, int, str]  # scheme, address, port, name


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


class _Connection:
    __slots__ = ("protocol", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = h11.Connection(h11.CLIENT)

    def close(self) -> None:
        self.writer.close()


class _Stale(Exception):
    """A kept-alive connection the server had closed: nothing of an answer came."""


class EndpointPoster:
    """Posts events over connections it keeps (``connections`` idle ones per address at most);
    ``aclose`` closes them."""

    def __init__(
        self,
        *,
        resolve: Resolve | None = None,
        connections: int = 16,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._resolve = resolve or _resolve
        self._most_idle = connections
        self._tls = tls
        self._idle: dict[_Key, list[_Connection]] = {}

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, allow_private: bool
    ) -> PostAnswer:
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
        key = (parts.scheme, addresses[0], port, host)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request = h11.Request(
            method="POST",
            target=target,
            headers=[
                ("Host", parts.netloc.rpartition("@")[2]),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                *headers.items(),
            ],
        )
        try:
            async with asyncio.timeout(WHOLE_S):
                return await self._exchange(key, request, body)
        except TimeoutError:
            return PostAnswer(None, error=f"no answer within {WHOLE_S:g} s")
        except (OSError, ssl.SSLError, h11.ProtocolError, _Stale) as exc:
            return PostAnswer(None, error=f"{type(exc).__name__}: {exc}"[:300])

    async def _exchange(self, key: _Key, request: h11.Request, body: bytes) -> PostAnswer:
        idle = self._idle.get(key)
        while idle:  # a kept connection first; one the server closed meanwhile is dropped
            conn = idle.pop()
            try:
                return await self._send(key, conn, request, body)
            except (_Stale, ConnectionError):
                conn.close()
        return await self._send(key, await self._connect(key), request, body)

    async def _connect(self, key: _Key) -> _Connection:
        scheme, address, port, host = key
        tls = None
        if scheme == "https":
            tls = self._tls or ssl.create_default_context()
        try:
            async with asyncio.timeout(CONNECT_S):
                reader, writer = await asyncio.open_connection(
                    address, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError:
            raise OSError(f"no connection to {address}:{port} within {CONNECT_S:g} s") from None
        return _Connection(reader, writer)

    async def _send(
        self, key: _Key, conn: _Connection, request: h11.Request, body: bytes
    ) -> PostAnswer:
        protocol = conn.protocol
        wire = protocol.send(request) or b""
        wire += protocol.send(h11.Data(data=body)) or b""
        wire += protocol.send(h11.EndOfMessage()) or b""
        conn.writer.write(wire)
        status: int | None = None
        retry_after: str | None = None
        heard = 0
        try:
            await conn.writer.drain()
            while True:
                event = protocol.next_event()
                if event is h11.NEED_DATA:
                    chunk = await conn.reader.read(16_384)
                    if not chunk and status is None and not heard:
                        raise _Stale("the connection was closed before an answer")
                    heard += len(chunk)
                    if heard > _MOST_ANSWER_BYTES + 16_384:
                        raise h11.LocalProtocolError("the answer is too long")
                    protocol.receive_data(chunk)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    for name, value in event.headers:
                        if name == b"retry-after":
                            retry_after = value.decode("latin-1")
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
        except BaseException:
            conn.close()
            raise
        self._keep(key, conn)
        assert status is not None
        error = "" if 200 <= status < 300 else f"answered {status}"
        return PostAnswer(status, retry_after, error)

    def _keep(self, key: _Key, conn: _Connection) -> None:
        protocol = conn.protocol
        if protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
            protocol.start_next_cycle()
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._most_idle:
                idle.append(conn)
                return
        conn.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()
