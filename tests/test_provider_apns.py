"""The ``apns`` kind against a loopback APNs: HTTP/2 over TLS (ALPN ``h2``, hypercorn) with a
certificate the test makes and the provider trusts through ``ca_file``, the ES256 JWT checked
with the key's public half. Every documented answer maps onto an outcome; the JWT is reused,
and made again after 50 minutes and after a 403; the device token and the key never show."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID

from engine import (
    BUILTIN_KINDS,
    ConfigError,
    FakeClock,
    Message,
    NotificationState,
    Outcome,
    ProviderConfig,
    Store,
)
from engine.providers.apns import ApnsProvider
from tests.redis_server import free_port
from tests.servers import fast_engine

KEY = ec.generate_private_key(ec.SECP256R1())
PEM = KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
TEAM, KEY_ID, TOPIC = "TEAM123456", "KEYID12345", "com.example.app"
DEVICE = "a1b2c3d4" * 8

Answer = tuple[int, dict[str, Any]]


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _jwt_ok(bearer: str) -> bool:
    head, claims, signature = bearer.split(".")
    raw = _unb64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        KEY.public_key().verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    said: dict[str, Any] = json.loads(_unb64(claims))
    header: dict[str, Any] = json.loads(_unb64(head))
    return header == {"alg": "ES256", "kid": KEY_ID} and said.get("iss") == TEAM


class Apple:
    """APNs' /3/device/TOKEN: checks HTTP/2, the JWT and the headers, then answers as told."""

    def __init__(
        self, answers: list[Answer] | None = None, *, unregistered: frozenset[str] = frozenset()
    ) -> None:
        self.answers = answers or []
        self.unregistered = unregistered  # device tokens answered 410 whatever comes first
        self.seen: list[dict[str, Any]] = []
        self.bearers: set[str] = set()

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        bearer = headers.get("authorization", "").removeprefix("bearer ")
        self.bearers.add(bearer)
        self.seen.append(
            {
                "version": scope["http_version"],
                "path": scope["path"],
                "headers": headers,
                "body": json.loads(body),
            }
        )
        if not _jwt_ok(bearer):
            status, reply = 403, {"reason": "InvalidProviderToken"}
        elif scope["path"].rsplit("/", 1)[-1] in self.unregistered:
            status, reply = 410, {"reason": "Unregistered"}
        elif self.answers:
            status, reply = self.answers.pop(0)
        else:
            status, reply = 200, {}
        out = [(b"apns-id", headers.get("apns-id", "").encode())]
        if status == 429:
            out.append((b"retry-after", b"4"))
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send(
            {"type": "http.response.body", "body": json.dumps(reply).encode() if reply else b""}
        )


def _certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    loopback = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(loopback, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "apns.pem", folder / "apns.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@asynccontextmanager
async def serving(apple: Any, folder: Path) -> AsyncIterator[tuple[str, Path]]:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    cert, key = _certificate(folder)
    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.certfile, config.keyfile = str(cert), str(key)
    config.alpn_protocols = ["h2"]
    config.loglevel = "ERROR"
    stop = asyncio.Event()
    task = asyncio.ensure_future(serve(apple, config, shutdown_trigger=stop.wait))
    await asyncio.sleep(0.3)
    try:
        yield f"https://127.0.0.1:{port}", cert
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def _provider(base_url: str, ca_file: Path, **options: str) -> ApnsProvider:
    opts = {
        "team_id": TEAM,
        "key_id": KEY_ID,
        "topic": TOPIC,
        "base_url": base_url,
        "ca_file": str(ca_file),
        **options,
    }
    built = BUILTIN_KINDS["apns"](ProviderConfig("ios", "apns", opts, {"signing_key": PEM}))
    assert isinstance(built, ApnsProvider)
    return built


def _message(payload: dict[str, Any] | None = None, key: str = "order-42") -> Message:
    return Message(
        1, "acme", "ios", DEVICE, payload or {"title": "Shipped", "body": "Order 42"}, key, 1
    )


async def test_a_push_goes_over_http2_with_the_headers_apple_asks_for(tmp_path: Path) -> None:
    apple = Apple()
    async with serving(apple, tmp_path) as (url, ca):
        provider = _provider(url, ca, priority="5")
        try:
            first = await provider.send(_message({"title": "Hi", "collapse_id": "c1"}))
            second = await provider.send(_message({"aps": {"badge": 3}}, key="other"))
        finally:
            await provider.aclose()
    assert first.outcome is Outcome.DELIVERED and second.outcome is Outcome.DELIVERED
    one, two = apple.seen
    assert one["version"] == "2" and one["path"] == f"/3/device/{DEVICE}"
    assert one["body"] == {"aps": {"alert": {"title": "Hi"}}}
    assert two["body"] == {"aps": {"badge": 3}}
    h = one["headers"]
    assert (h["apns-topic"], h["apns-push-type"], h["apns-priority"]) == (TOPIC, "alert", "5")
    assert h["apns-collapse-id"] == "c1" and h["apns-expiration"] == "0"
    assert h["apns-id"] == str(
        uuid.uuid5(uuid.UUID("5e0b3a70-3c1e-4b8f-9d5a-0c1f2e3d4a5b"), "order-42")
    )
    assert len(apple.bearers) == 1 and provider.tokens_made == 1  # one JWT for both


@pytest.mark.parametrize(
    ("answer", "outcome", "fault"),
    [
        ((410, {"reason": "Unregistered", "timestamp": 1}), Outcome.PERMANENT, False),
        ((400, {"reason": "BadDeviceToken"}), Outcome.PERMANENT, False),
        ((429, {"reason": "TooManyRequests"}), Outcome.THROTTLED, False),
        ((403, {"reason": "TopicDisallowed"}), Outcome.UNAVAILABLE, True),
        ((500, {"reason": "InternalServerError"}), Outcome.TRANSIENT, True),
        ((503, {"reason": "ServiceUnavailable"}), Outcome.TRANSIENT, True),
    ],
)
async def test_each_answer_maps_onto_an_outcome(
    tmp_path: Path, answer: Answer, outcome: Outcome, fault: bool
) -> None:
    async with serving(Apple([answer]), tmp_path) as (url, ca):
        provider = _provider(url, ca)
        try:
            result = await provider.send(_message())
        finally:
            await provider.aclose()
    assert result.outcome is outcome, result
    assert result.is_provider_fault is fault
    assert result.recipient_gone is (answer[0] == 410)  # Unregistered: suppressed
    assert DEVICE not in result.detail and answer[1]["reason"] in result.detail
    if outcome is Outcome.THROTTLED:
        assert result.retry_after_s == 4.0


async def test_the_token_is_made_again_after_50_minutes_and_after_a_403(tmp_path: Path) -> None:
    clock = FakeClock()
    apple = Apple([(403, {"reason": "ExpiredProviderToken"})])
    async with serving(apple, tmp_path) as (url, ca):
        provider = _provider(url, ca)
        provider._clock = clock
        try:
            refused = await provider.send(_message())
            clock.advance(1)
            again = await provider.send(_message())  # a new token after the 403
            clock.advance(50 * 60)
            later = await provider.send(_message())
        finally:
            await provider.aclose()
    assert refused.outcome is Outcome.UNAVAILABLE
    assert again.outcome is later.outcome is Outcome.DELIVERED
    assert provider.tokens_made == 3


async def test_an_untrusted_server_is_unavailable(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    other, _ = _certificate(folder)  # a certificate the server does not use
    async with serving(Apple(), tmp_path) as (url, _ca):
        provider = _provider(url, other)
        try:
            result = await provider.send(_message())
        finally:
            await provider.aclose()
    assert result.outcome is Outcome.UNAVAILABLE


@pytest.mark.parametrize(
    ("options", "secret", "words"),
    [
        ({"team_id": "short"}, PEM, "team_id"),
        ({}, "not a key", "not a PEM private key"),
        ({"base_url": "http://127.0.0.1:1"}, PEM, "https"),
        ({"ca_file": "/nonexistent/ca.pem"}, PEM, "ca_file"),
        ({"priority": "11"}, PEM, "priority"),
    ],
)
def test_bad_options_are_one_sentence(options: dict[str, str], secret: str, words: str) -> None:
    base = {"team_id": TEAM, "key_id": KEY_ID, "topic": TOPIC, **options}
    with pytest.raises(ConfigError) as refused:
        BUILTIN_KINDS["apns"](ProviderConfig("ios", "apns", base, {"signing_key": secret}))
    assert words in refused.value.message and "PRIVATE" not in refused.value.message


async def test_pushes_go_through_an_engine(store: Store, tmp_path: Path) -> None:
    """Through a dispatching engine on each store: delivered over HTTP/2, an unregistered
    device dead, a throttle spending no attempt."""
    # The device is answered by its token, not from the queue of answers: with two sends at
    # once, a 410 put first in the queue could go to the other one.
    gone = "f" * 64
    apple = Apple([(429, {"reason": "TooManyRequests"})], unregistered=frozenset({gone}))

    async with (
        serving(apple, tmp_path) as (url, ca),
        fast_engine(store, concurrency=2, max_attempts=3) as engine,
    ):
        await engine.add_tenant("acme")
        options = {
            "team_id": TEAM,
            "key_id": KEY_ID,
            "topic": TOPIC,
            "base_url": url,
            "ca_file": str(ca),
        }
        await engine.add_provider("ios", "apns", options=options, secrets={"signing_key": PEM})
        for n in range(3):
            await engine.enqueue("acme", "ios", f"{n:064x}", {"title": f"hi {n}"})
        dead_one = await engine.enqueue("acme", "ios", gone, {"title": "bye"})
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30)
        delivered = await engine.notifications("acme", state=NotificationState.DELIVERED)
        dead = await engine.dead("acme")
    assert len(delivered) == 3 and all(v.failures == 0 for v in delivered)
    assert [view.id for _, view in dead] == [dead_one.id]
    assert "Unregistered" in (dead[0][1].last_error or "")
    assert {s["version"] for s in apple.seen} == {"2"}
