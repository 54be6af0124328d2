"""A loopback APNs for the tests of the ``apns`` kind: the ES256 key and its PEM, Apple's
answers, a TLS certificate the provider trusts, and an HTTP/2 server (hypercorn)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID

from testkit.redis_server import free_port

KEY = ec.generate_private_key(ec.SECP256R1())
PEM = KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
TEAM, KEY_ID, TOPIC = "TEAM123456", "KEYID12345", "com.example.app"
DEVICE = "a1b2c3d4" * 8

Answer = tuple[int, dict[str, Any]]


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jwt_ok(bearer: str) -> bool:
    head, claims, signature = bearer.split(".")
    raw = unb64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        KEY.public_key().verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    said: dict[str, Any] = json.loads(unb64(claims))
    header: dict[str, Any] = json.loads(unb64(head))
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
        if not jwt_ok(bearer):
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


def certificate(folder: Path) -> tuple[Path, Path]:
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

    cert, key = certificate(folder)
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
