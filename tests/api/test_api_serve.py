"""``omnipost serve`` as an operator starts it: HTTPS with a certificate and key, several
processes, and bad flags or a taken port as one sentence with exit 2 and nothing served."""

from __future__ import annotations

import datetime
import ipaddress
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from testkit.api import serve, set_up
from testkit.cli import REPO, Cli, assert_one_sentence, clean_env

pytestmark = pytest.mark.slow


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _run(store_url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "serve", *args],
        env=clean_env(home, OMNIPOST_DB=store_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_https_with_a_certificate_and_key(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = set_up(cli)
    cert, key = _self_signed(tmp_path)
    port = _port()
    args = ("--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key))
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", *args],
        env=clean_env(tmp_path, OMNIPOST_DB=store_url),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=trust, timeout=5) as client:
            for _ in range(300):
                try:
                    answer = client.get(
                        f"https://127.0.0.1:{port}/v1/limits",
                        headers={"Authorization": f"Bearer {keys['acme']}"},
                    )
                    break
                except httpx.ConnectError:
                    time.sleep(0.05)
            assert answer.status_code == 200 and answer.json()["tenant"] == "acme"
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    assert f"https://127.0.0.1:{port}/v1" in out.decode()


def test_two_processes_serve_and_stop_together(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = set_up(cli)
    with serve(store_url, tmp_path, keys, "--workers", "2") as served:
        answers = [
            served.post("acme", {"provider": "sim", "recipient": f"u{n}@x.y"}) for n in range(20)
        ]
        assert {a.status_code for a in answers} == {202}
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=30) == 0
    assert "2 processes" in served.output() and "Traceback" not in served.output()


def test_bad_flags_and_a_taken_port_are_one_sentence(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    cert, key = _self_signed(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _run(store_url, tmp_path, "--port", str(port))
        assert done.returncode == 2 and "cannot serve the API on 127.0.0.1 port" in done.stderr
        assert_one_sentence(done.stderr)
    for args, words in (
        (["--tls-cert", str(cert)], "give both --tls-cert and --tls-key"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.pem")], "there is no file"),
        (["--tls-cert", str(key), "--tls-key", str(cert)], "cannot use"),
        (["--port", "70000"], "port"),
        (["--workers", "0"], "workers"),
    ):
        done = _run(store_url, tmp_path, "--port", str(_port()), *args)
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    missing = _run(f"sqlite:///{tmp_path / 'none' / 'x.db'}", tmp_path, "--port", str(_port()))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def _port() -> int:
    from testkit.redis_server import free_port

    return free_port()


async def test_answers_leave_at_once_on_any_loop() -> None:
    """The server's socket says TCP, so asyncio's own loop (the one the console runs the API on,
    and the server's where uvloop is not installed) turns Nagle's algorithm off on every
    connection it accepts; with it on, each answer after a connection's first waited about 40 ms
    for the client's delayed ACK."""
    import asyncio

    from app.serve import _bind

    sock = _bind("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=sock)
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
