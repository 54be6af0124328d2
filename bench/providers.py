"""Sends per second through each HTTP provider kind against a local server, beside a bare client
making the same requests in the same run. Prints JSON.

    .venv/bin/python bench/providers.py [--count 3000] [--concurrency 32] [--repeat 2]

The server (``bench/_provider_server.py``: it answers as Twilio, Google's token endpoint, FCM and
APNs do when all is well) runs in a process of its own, on uvicorn for HTTP/1.1 and on hypercorn
for HTTP/2 over TLS. For each kind, ``--count`` messages go out at ``--concurrency`` at once:

- ``provider``: ``Provider.send`` of the built kind (its request built from the message, its
  credentials, its answer read into an outcome);
- ``bare``: one httpx client posting the same requests (the same body, headers and credentials,
  made once beforehand), reading nothing but the status.

Target (issue 32): each kind at least 0.7x of its bare client.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from _common import emit, parser

from engine import BUILTIN_KINDS, Message, Outcome, Provider, ProviderConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.7
ACCOUNT = "AC" + "0" * 32


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keys(folder: Path) -> dict[str, Any]:
    """A service account (RSA), an APNs key (P-256) and a TLS certificate for 127.0.0.1."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    def pem(key: Any) -> str:
        return str(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode()
        )

    tls = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(tls.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(tls, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_text(pem(tls))
    account = {
        "client_email": "bench@bench.iam.gserviceaccount.com",
        "private_key": pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    }
    return {"account": json.dumps(account), "p8": pem(ec.generate_private_key(ec.SECP256R1()))}


class Servers:
    """uvicorn (HTTP/1.1) and hypercorn (HTTP/2 over TLS) serving the app, each a process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.http_port, self.h2_port = _free_port(), _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Servers:
        bench = str(ROOT / "bench")
        h1 = [sys.executable, "-m", "uvicorn", "_provider_server:app", "--app-dir", bench]
        h1 += ["--port", str(self.http_port), "--no-access-log", "--log-level", "warning"]
        h2 = [sys.executable, "_provider_server.py", str(self.h2_port)]
        h2 += [str(self.folder / "cert.pem"), str(self.folder / "key.pem")]
        env = {**os.environ, "PYTHONPATH": bench}
        for cmd in (h1, h2):
            self.procs.append(
                subprocess.Popen(
                    cmd, cwd=bench, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
                )
            )
        deadline = time.monotonic() + 30
        cert = str(self.folder / "cert.pem")
        probes: list[tuple[str, bool | str]] = [
            (f"http://127.0.0.1:{self.http_port}/token", True),
            (f"https://127.0.0.1:{self.h2_port}/token", cert),
        ]
        for url, verify in probes:
            while True:
                try:
                    if httpx.post(url, verify=verify, timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"no answer from {url}") from None
                    time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _configs(servers: Servers, keys: dict[str, Any]) -> dict[str, ProviderConfig]:
    http = f"http://127.0.0.1:{servers.http_port}"
    h2 = f"https://127.0.0.1:{servers.h2_port}"
    return {
        "twilio": ProviderConfig(
            "sms", "twilio", {"account_sid": ACCOUNT, "from": "+15550001111", "base_url": http},
            {"auth_token": "bench-token"},
        ),
        "fcm": ProviderConfig(
            "push", "fcm", {"project_id": "bench", "base_url": http, "token_url": f"{http}/token"},
            {"service_account": keys["account"]},
        ),
        "apns": ProviderConfig(
            "ios", "apns",
            {"team_id": "TEAM123456", "key_id": "KEYID12345", "topic": "com.example.app",
             "base_url": h2, "ca_file": str(servers.folder / "cert.pem")},
            {"signing_key": keys["p8"]},
        ),
    }  # fmt: skip


def _message(kind: str, n: int) -> Message:
    recipient = {"twilio": f"+1555{n:07d}", "fcm": f"fcm-token-{n}", "apns": f"{n:064x}"}[kind]
    payload = {"body": f"hello {n}", "title": "Bench"}
    return Message(n, "bench", kind, recipient, payload, f"bench-{n}", 1)


Bare = Callable[[int], Awaitable[int]]


def _bare(kind: str, servers: Servers, keys: dict[str, Any]) -> tuple[httpx.AsyncClient, Bare]:
    """The same requests, made by hand: body and credentials prepared once."""
    http = f"http://127.0.0.1:{servers.http_port}"
    if kind == "twilio":
        client = httpx.AsyncClient(auth=(ACCOUNT, "bench-token"))
        url = f"{http}/2010-04-01/Accounts/{ACCOUNT}/Messages.json"

        async def twilio(n: int) -> int:
            data = {"To": f"+1555{n:07d}", "Body": f"hello {n}", "From": "+15550001111"}
            return (await client.post(url, data=data)).status_code

        return client, twilio
    if kind == "fcm":
        client = httpx.AsyncClient(headers={"Authorization": "Bearer ya29.bench"})
        url = f"{http}/v1/projects/bench/messages:send"

        async def fcm(n: int) -> int:
            body = {
                "message": {
                    "token": f"fcm-token-{n}",
                    "notification": {"title": "Bench", "body": f"hello {n}"},
                }
            }
            return (await client.post(url, json=body)).status_code

        return client, fcm
    import ssl

    from engine.providers.apns import es256_token

    config = _configs(servers, keys)["apns"]
    built = BUILTIN_KINDS["apns"](config)
    key = built._key  # type: ignore[attr-defined]
    token = es256_token(key, "KEYID12345", "TEAM123456", time.time())
    verify = ssl.create_default_context(cafile=str(servers.folder / "cert.pem"))
    client = httpx.AsyncClient(http2=True, verify=verify)
    base = f"https://127.0.0.1:{servers.h2_port}/3/device/"
    headers = {
        "authorization": f"bearer {token}",
        "apns-topic": "com.example.app",
        "apns-push-type": "alert",
        "apns-priority": "10",
        "apns-expiration": "0",
    }

    async def apns(n: int) -> int:
        body = json.dumps({"aps": {"alert": {"body": f"hello {n}", "title": "Bench"}}}).encode()
        return (await client.post(f"{base}{n:064x}", content=body, headers=headers)).status_code

    return client, apns


async def _run(
    count: int, concurrency: int, one: Callable[[int], Awaitable[bool]]
) -> dict[str, Any]:
    left = iter(range(count))
    ok = 0

    async def worker() -> None:
        nonlocal ok
        for n in left:
            done = await one(n)  # awaited first: ``ok += await ...`` would read ok before
            ok += done

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {"per_s": count / elapsed, "ok": ok}


async def measure(
    kind: str, servers: Servers, keys: dict[str, Any], count: int, n: int
) -> dict[str, Any]:
    provider: Provider = BUILTIN_KINDS[kind](_configs(servers, keys)[kind])
    client, bare = _bare(kind, servers, keys)
    try:

        async def sent(i: int) -> bool:
            return (await provider.send(_message(kind, i))).outcome is Outcome.DELIVERED

        async def posted(i: int) -> bool:
            return 200 <= await bare(i) < 300

        await _run(min(200, count), n, sent)  # warm: connections, the first token
        await _run(min(200, count), n, posted)
        ours = await _run(count, n, sent)
        theirs = await _run(count, n, posted)
    finally:
        await provider.aclose()
        await client.aclose()
    return {"provider": ours, "bare": theirs, "ratio": round(ours["per_s"] / theirs["per_s"], 3)}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    report: dict[str, Any] = {"count": args.count, "concurrency": args.concurrency,
                              "target": TARGET, "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="omnipost-providers-") as folder:
        keys = _keys(Path(folder))
        with Servers(Path(folder)) as servers:
            for _ in range(args.repeat):
                run = {}
                for kind in ("twilio", "fcm", "apns"):
                    run[kind] = asyncio.run(
                        measure(kind, servers, keys, args.count, args.concurrency)
                    )
                report["runs"].append(run)
    emit(report, args.out)


if __name__ == "__main__":
    main()
