"""Real servers on 127.0.0.1 for end-to-end tests: a scripted HTTP server (also runnable on
a thread of its own, for code that runs its own event loop) and an aiosmtpd mail server; and
``fast_engine``, a real engine whose retries come quickly.

Also the helpers of ``test_provider_webhook`` and ``test_provider_smtp``; these record
arrival times and the status each request was answered with.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from http import HTTPStatus
from types import TracebackType
from typing import Any, Self

from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    LocalLimiter,
    RetryPolicy,
    Store,
    SystemClock,
)

__all__ = [
    "Answer",
    "MailServer",
    "Mailbox",
    "Reply",
    "Request",
    "Script",
    "ScriptedServer",
    "ThreadedServer",
    "fast_engine",
]

FAST_RETRY = RetryPolicy(base_s=0.05, cap_s=0.2)


@contextlib.asynccontextmanager
async def fast_engine(
    store: Store, *, concurrency: int, max_attempts: int
) -> AsyncIterator[Engine]:
    """An opened (not started) engine on ``store`` with the built-in providers, a local
    limiter and transient retries after 25-200 ms; closed on exit."""
    settings = EngineSettings(
        dispatch=DispatcherSettings(concurrency=concurrency, retry=FAST_RETRY),
        max_attempts=max_attempts,
    )
    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
    await engine.open()
    try:
        yield engine
    finally:
        await engine.close()


# -- HTTP --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    at: float = 0.0  # the server loop's monotonic time when the request was read

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0


@dataclass(frozen=True)
class Answer:
    """A request and what the server answered, written just before the reply was sent."""

    request: Request
    reply: Reply
    at: float  # the server loop's monotonic time
    wall: float  # Unix seconds, for reading a Retry-After date


Script = list[Reply | Callable[[Request], Reply]]


class ScriptedServer:
    """HTTP/1.1 with keep-alive; each path answers from its script, the last entry repeating
    (so a script of one callable answers every request of that path)."""

    def __init__(self, scripts: dict[str, Script]) -> None:
        self.scripts = scripts
        self.requests: list[Request] = []
        self.answers: list[Answer] = []
        self.served: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def seen(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        loop = asyncio.get_running_loop()
        try:
            while request := await self._read(reader, loop):
                self.requests.append(request)
                reply = self._reply_to(request)
                await asyncio.sleep(reply.delay_s)
                head = f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}\r\n"
                headers = {**reply.headers, "Content-Length": str(len(reply.body))}
                head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                self.answers.append(Answer(request, reply, loop.time(), time.time()))
                writer.write(head.encode() + b"\r\n" + reply.body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    @staticmethod
    async def _read(
        reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop
    ) -> Request | None:
        line = await reader.readline()
        if not line:
            return None
        method, path, _ = line.decode().split(" ", 2)
        headers: dict[str, str] = {}
        while (header := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = header.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return Request(method, path, headers, body, loop.time())

    def _reply_to(self, request: Request) -> Reply:
        script = self.scripts.get(request.path, [Reply(404)])
        index = self.served.get(request.path, 0)
        self.served[request.path] = index + 1
        step = script[min(index, len(script) - 1)]
        return step(request) if callable(step) else step


class ThreadedServer:
    """A ``ScriptedServer`` on an event loop of its own in a background thread, for callers
    that run their own loop (``asyncio.run`` in the CLI). Read ``server`` only after exit, or
    accept that lists may still grow."""

    def __init__(self, scripts: dict[str, Script]) -> None:
        self.server = ScriptedServer(scripts)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="scripted-http", daemon=True
        )

    def url(self, path: str) -> str:
        return self.server.url(path)

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.__aenter__(), self._loop).result(10)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.__aexit__(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


# -- SMTP --------------------------------------------------------------------------------------


class Mailbox:
    """An aiosmtpd handler that keeps what it accepts. ``rcpt_reply(address)`` and
    ``data_reply(envelope)`` may return a reply (``"421 ..."``) to refuse instead."""

    def __init__(self) -> None:
        self.received: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.rcpt_reply: Callable[[str], str | None] = lambda _: None
        self.data_reply: Callable[[Envelope], str | None] = lambda _: None

    async def handle_RCPT(  # aiosmtpd hook names
        self, server: SMTPServer, session: Session, envelope: Envelope, address: str, _: Any
    ) -> str:
        refusal = self.rcpt_reply(address)
        if refusal:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        refusal = self.data_reply(envelope)
        if refusal:
            return refusal
        assert isinstance(envelope.content, bytes)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.received.append(parsed)
        self.envelopes.append((str(envelope.mail_from), list(envelope.rcpt_tos)))
        return "250 2.0.0 Ok: queued as 42"


class MailServer:
    """An aiosmtpd server on 127.0.0.1 on the running loop; ``async with`` starts and stops it."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.mailbox = Mailbox()
        self.sessions: list[SMTPServer] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    def _protocol(self) -> SMTPServer:
        loop = asyncio.get_running_loop()
        session = SMTPServer(self.mailbox, hostname="mx.test", loop=loop, **self.options)
        self.sessions.append(session)
        return session

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def drop_connections(self) -> None:
        for session in self.sessions:
            if session.transport is not None:
                session.transport.close()

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_connections()
        await self._server.wait_closed()
        await asyncio.sleep(0)  # let the sessions see their connections go
