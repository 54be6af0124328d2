"""WebhookProvider against a real HTTP server on 127.0.0.1, plus its pure helpers."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from engine.core.clock import FakeClock
from engine.core.domain import Outcome, SendResult
from engine.core.errors import ConfigError
from engine.providers import ProviderConfig, WebhookProvider, verify_signature
from engine.providers.webhook import USER_AGENT, parse_retry_after, sign
from testkit.servers import Reply, Request, Script, ScriptedServer
from testkit.support import message

SECRET = "whsec-test-0123456789"
RECIPIENT = "bob@example.com"


def check_signature(request: Request) -> Reply:
    """What a receiver does: verify the raw body against the header, else refuse."""
    header = request.headers.get("omnipost-signature", "")
    return Reply(200) if verify_signature(SECRET, header, request.body) else Reply(401)


def echo_recipient(request: Request) -> Reply:
    return Reply(400, body=f'{{"error": "bad recipient {request.json()["recipient"]}"}}'.encode())


SCRIPTS: dict[str, Script] = {
    "/ok": [Reply(200)],
    "/accepted": [Reply(202)],
    "/signed": [check_signature],
    "/retry-seconds": [Reply(429, {"Retry-After": "7"})],
    "/retry-date": [lambda _: Reply(429, {"Retry-After": formatdate(1_700_000_030, usegmt=True)})],
    "/retry-none": [Reply(429)],
    "/retry-garbage": [Reply(429, {"Retry-After": "soon"})],
    "/retry-huge": [Reply(429, {"Retry-After": "999999"})],
    "/error": [Reply(500, body=b"boom")],
    "/unavailable": [Reply(503)],
    "/bad": [echo_recipient],
    "/gone": [Reply(410)],
    "/moved": [Reply(301, {"Location": "https://elsewhere.example/hook"})],
    "/hang": [Reply(200, delay_s=5.0)],
    "/throttle-then-ok": [Reply(429, {"Retry-After": "0"}), Reply(200)],
}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(SCRIPTS) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as shared:
        yield shared


def provider(
    server: ScriptedServer, client: httpx.AsyncClient, path: str, **kwargs: Any
) -> WebhookProvider:
    clock = FakeClock(wall_offset=1_700_000_000.0 - 1_000.0)  # wall() == 1_700_000_000
    return WebhookProvider("hook", server.url(path), client=client, clock=clock, **kwargs)


async def send(server: ScriptedServer, client: httpx.AsyncClient, path: str) -> SendResult:
    return await provider(server, client, path).send(message())


async def test_2xx_is_delivered_with_body_and_headers(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    hook = provider(server, client, "/ok", headers={"X-Team": "ops", "Authorization": "Bearer t"})
    # "attempt" is the retry policy's count, not the lease's claim number (bumped by throttles)
    sent = message(9, {"text": "héllo"}, recipient=RECIPIENT, attempt=7, delivery_attempt=3)
    result = await hook.send(sent)
    assert result == SendResult.delivered("HTTP 200 OK")
    [request] = server.requests
    assert request.method == "POST"
    assert request.json() == {
        "id": 9,
        "tenant": "acme",
        "recipient": RECIPIENT,
        "payload": {"text": "héllo"},
        "attempt": 3,
    }
    assert request.headers["idempotency-key"] == "key-9"
    assert request.headers["user-agent"] == USER_AGENT
    assert USER_AGENT.startswith("OmniPost/")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-team"] == "ops"
    assert request.headers["authorization"] == "Bearer t"
    assert "omnipost-signature" not in request.headers
    assert (await send(server, client, "/accepted")).outcome is Outcome.DELIVERED
    assert "omnipost-expires-at" not in request.headers  # no deadline: no header


async def test_a_deadline_is_a_header(server: ScriptedServer, client: httpx.AsyncClient) -> None:
    hook = provider(server, client, "/ok")
    sent = message(9, {"text": "hi"}, recipient=RECIPIENT)
    sent.expires_at, sent.ttl_s = 1_800_000_000.25, 30.0
    assert (await hook.send(sent)).outcome is Outcome.DELIVERED
    [request] = server.requests
    assert request.headers["omnipost-expires-at"] == "2027-01-15T08:00:00.250Z"


async def test_the_receiver_verifies_the_signature(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    hook = WebhookProvider("hook", server.url("/signed"), client=client, signing_key=SECRET)
    assert (await hook.send(message())).outcome is Outcome.DELIVERED  # the receiver checked it
    [request] = server.requests
    header = request.headers["omnipost-signature"]
    assert verify_signature(SECRET, header, request.body)
    assert not verify_signature(SECRET, header, request.body.replace(b'"hi"', b'"ho"'))
    assert not verify_signature("another-key", header, request.body)
    wrong = WebhookProvider("hook", server.url("/signed"), client=client, signing_key="nope")
    result = await wrong.send(message())  # a wrong key is wrong for every message alike
    assert result.outcome is Outcome.UNAVAILABLE
    assert result.is_provider_fault
    assert result.detail.startswith("HTTP 401")


async def test_the_signature_carries_the_clock_time(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    await provider(server, client, "/ok", signing_key=SECRET).send(message())
    [request] = server.requests
    header = request.headers["omnipost-signature"]
    assert header.startswith("t=1700000000,v1=")
    assert verify_signature(SECRET, header, request.body, now=1_700_000_000.0)


@pytest.mark.parametrize(
    ("path", "retry_after_s"),
    [
        ("/retry-seconds", 7.0),
        ("/retry-date", 30.0),  # an HTTP date 30 s after the provider's clock
        ("/retry-none", 1.0),
        ("/retry-garbage", 1.0),
        ("/retry-huge", 3600.0),
    ],
)
async def test_429_is_throttled_with_retry_after(
    server: ScriptedServer, client: httpx.AsyncClient, path: str, retry_after_s: float
) -> None:
    result = await send(server, client, path)
    assert result.outcome is Outcome.THROTTLED
    assert result.retry_after_s == retry_after_s
    assert result.detail == "HTTP 429 Too Many Requests"


@pytest.mark.parametrize(
    ("path", "outcome", "provider_fault", "detail"),
    [
        ("/error", Outcome.TRANSIENT, True, "HTTP 500 Internal Server Error: boom"),
        ("/unavailable", Outcome.TRANSIENT, True, "HTTP 503 Service Unavailable"),
        ("/gone", Outcome.PERMANENT, False, "HTTP 410 Gone"),
        ("/nowhere", Outcome.PERMANENT, False, "HTTP 404 Not Found"),
        ("/moved", Outcome.PERMANENT, False, "HTTP 301 Moved Permanently: the endpoint redirects"),
    ],
)
async def test_status_codes_map_to_outcomes(
    server: ScriptedServer,
    client: httpx.AsyncClient,
    path: str,
    outcome: Outcome,
    provider_fault: bool,
    detail: str,
) -> None:
    """A 5xx spends the attempt but is the provider's fault (it counts toward the circuit)."""
    result = await send(server, client, path)
    assert result.outcome is outcome
    assert result.is_provider_fault is provider_fault
    assert result.detail.startswith(detail)


async def test_a_400_is_permanent_and_never_shows_the_recipient(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    result = await send(server, client, "/bad")
    assert result.outcome is Outcome.PERMANENT
    assert result.detail == 'HTTP 400 Bad Request: {"error": "bad recipient <recipient>"}'


async def test_a_server_that_hangs_past_the_timeout_is_unavailable(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await provider(server, client, "/hang", timeout_s=0.2).send(message())
    assert loop.time() - started < 2.0
    assert result == SendResult.unavailable("no answer within 0.2 s")


async def test_a_refused_connection_is_unavailable(client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    hook = WebhookProvider("hook", f"http://127.0.0.1:{port}/x", client=client)
    result = await hook.send(message())
    assert result.outcome is Outcome.UNAVAILABLE
    assert result.detail.startswith("ConnectError")


async def test_a_throttled_notification_is_delivered_once_on_the_next_try(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    hook = provider(server, client, "/throttle-then-ok")
    first, second = await hook.send(message(5)), await hook.send(message(5))
    assert (first.outcome, first.retry_after_s, second.outcome) == (
        Outcome.THROTTLED,
        0.0,
        Outcome.DELIVERED,
    )
    keys = [r.headers["idempotency-key"] for r in server.seen("/throttle-then-ok")]
    assert keys == ["key-5", "key-5"]


async def test_its_own_pooled_client_is_opened_lazily_and_closed(server: ScriptedServer) -> None:
    config = ProviderConfig("hook", "webhook", {"url": server.url("/ok"), "timeout_s": "2"})
    hook = WebhookProvider.from_config(config)
    results = await asyncio.gather(*(hook.send(message(i)) for i in range(20)))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert len(server.requests) == 20
    await hook.aclose()
    await hook.aclose()


async def test_a_payload_that_is_not_json_is_permanent(
    server: ScriptedServer, client: httpx.AsyncClient
) -> None:
    result = await provider(server, client, "/ok").send(message(payload={"x": {1, 2}}))
    assert result.outcome is Outcome.PERMANENT
    assert server.requests == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 1.0),
        ("", 1.0),
        ("0", 0.0),
        ("120", 120.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("nan", 1.0),
        ("86400", 3600.0),
        ("Tue, 14 Nov 2023 22:14:20 GMT", 20.0),  # 1_700_000_060
        ("Tue, 14 Nov 2023 22:12:00 GMT", 0.0),  # in the past
        ("Tue, 14 Nov 2023 22:14:20", 20.0),  # no zone: read as UTC
        ("next tuesday", 1.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float) -> None:
    assert parse_retry_after(value, now=1_700_000_040.0) == expected


@pytest.mark.parametrize(
    ("header", "body", "now", "valid"),
    [
        (sign(SECRET, b"{}", 1000), b"{}", 1000.0, True),
        (sign(SECRET, b"{}", 1000), "{}", 1299.0, True),
        (sign(SECRET, b"{}", 1000), b"{}", 1301.0, False),  # too old: a replay
        (sign(SECRET, b"{}", 1000), b"{}", 699.0, False),  # from the future
        (sign(SECRET, b"{}", 1000), b"{ }", 1000.0, False),
        (sign("old", b"{}", 1000) + "," + sign(SECRET, b"{}", 1000)[7:], b"{}", 1000.0, True),
        ("t=1000", b"{}", 1000.0, False),
        ("v1=abc", b"{}", 1000.0, False),
        ("t=x,v1=abc", b"{}", 1000.0, False),
        ("", b"{}", 1000.0, False),
    ],
)
def test_verify_signature(header: str, body: bytes | str, now: float, valid: bool) -> None:
    assert verify_signature(SECRET, header, body, tolerance_s=300, now=now) is valid


def test_sign_follows_the_documented_scheme() -> None:
    expected = hmac.new(SECRET.encode(), b"1700000000.{}", hashlib.sha256).hexdigest()
    assert sign(SECRET, b"{}", 1_700_000_000) == f"t=1700000000,v1={expected}"


def webhook_config(
    options: dict[str, str], secrets: dict[str, str] | None = None
) -> ProviderConfig:
    return ProviderConfig("hook", "webhook", options, secrets or {})


@pytest.mark.parametrize(
    ("options", "secrets", "fragment"),
    [
        ({}, {}, "option 'url' is required."),
        ({"url": "ftp://x.example/"}, {}, "option 'url' must be an http:// or https://"),
        ({"url": "example.com/hook"}, {}, "option 'url' must be an http:// or https://"),
        ({"url": "https://"}, {}, "option 'url' must be an http:// or https://"),
        ({"url": "https://u:pw@x.example/"}, {}, "option 'url' must not hold a user name"),
        ({"url": "https://x.example", "timeout_s": "0"}, {}, "'timeout_s' must be a number above"),
        ({"url": "https://x.example", "timeout": "5"}, {}, "option 'timeout' is not known"),
        ({"url": "https://x.example", "header.Bad Name": "1"}, {}, "not name a valid HTTP header"),
        ({"url": "https://x.example", "header.Idempotency-Key": "1"}, {}, "OmniPost sets itself"),
        ({"url": "https://x.example", "header.X": "a\r\nb"}, {}, "printable ASCII on one line"),
        ({"url": "https://x.example"}, {"header.X": "sëcret"}, "secret 'header.X' must have"),
        ({"url": "https://x.example"}, {"signing": "k"}, "secret 'signing' is not known"),
    ],
)
def test_bad_options_are_refused_without_showing_secrets(
    options: dict[str, str], secrets: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=r"^provider 'hook': ") as caught:
        WebhookProvider.from_config(webhook_config(options, secrets))
    assert fragment in str(caught.value)
    assert "sëcret" not in str(caught.value)


async def test_from_config_reads_headers_and_repr_hides_secrets() -> None:
    config = webhook_config(
        {"url": "https://x.example/hook?token=abc", "header.X-Team": "ops"},
        {"signing_key": SECRET, "header.Authorization": "Bearer zzz"},
    )
    hook = WebhookProvider.from_config(config)
    assert hook.timeout_s == 10.0
    shown = repr(hook)
    assert shown == (
        "WebhookProvider(name='hook', url='https://x.example/hook', timeout_s=10, "
        "headers=['Authorization', 'X-Team'], signed=True)"
    )
    for secret in (SECRET, "zzz", "abc"):
        assert secret not in shown
    await hook.aclose()


async def test_the_server_can_be_stopped_with_a_request_in_flight(
    client: httpx.AsyncClient,
) -> None:
    async with ScriptedServer(SCRIPTS) as running:
        task = asyncio.create_task(provider(running, client, "/hang").send(message()))
        while not running.requests:
            await asyncio.sleep(0.01)
    result = await task  # the endpoint went away: nothing was delivered, no attempt spent
    assert result.outcome is Outcome.UNAVAILABLE
    assert result.detail.startswith("RemoteProtocolError: ")
