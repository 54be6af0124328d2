"""SmtpProvider against a real aiosmtpd server on 127.0.0.1, plus option validation."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.core.domain import Message, Outcome
from engine.core.errors import ConfigError
from engine.providers import ProviderConfig, SmtpProvider
from engine.providers.smtp import message_id
from testkit.servers import MailServer
from testkit.support import message

RECIPIENT = "bob@example.com"
DAY = datetime.timedelta(days=1)
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


@pytest.fixture
async def mail() -> AsyncIterator[MailServer]:
    async with MailServer() as server:
        yield server


@pytest.fixture
async def provider(mail: MailServer) -> AsyncIterator[SmtpProvider]:
    config = ProviderConfig(
        "mail",
        "smtp",
        {"host": "127.0.0.1", "port": str(mail.port), "security": "none", "timeout_s": "5"}
        | {"from": "OmniPost <noreply@omnipost.test>"},
    )
    smtp = SmtpProvider.from_config(config)
    yield smtp
    await smtp.aclose()


def order(n: int = 1, recipient: str = RECIPIENT) -> Message:
    """Order ``n``'s mail: its subject and its key (``order-N``) show in the headers."""
    payload = {"subject": f"Order {n} shipped", "text": "Your parcel is on its way.\n"}
    return message(n, payload, provider="mail", recipient=recipient, key=f"order-{n}")


async def test_a_message_is_delivered_once_with_a_message_id_from_its_key(
    mail: MailServer, provider: SmtpProvider
) -> None:
    result = await provider.send(order(7))
    assert result.outcome is Outcome.DELIVERED
    assert "queued as 42" in result.detail
    [received] = mail.mailbox.received
    assert received["Message-ID"] == "<omnipost.acme.order-7@omnipost.test>"
    assert received["To"] == RECIPIENT
    assert received["From"] == "OmniPost <noreply@omnipost.test>"
    assert received["Subject"] == "Order 7 shipped"
    assert received["Date"]
    body = received.get_body(("plain",))
    assert body is not None
    assert body.get_content().replace("\r\n", "\n") == "Your parcel is on its way.\n"
    assert mail.mailbox.envelopes == [("noreply@omnipost.test", [RECIPIENT])]


async def test_html_goes_in_an_alternative_part(mail: MailServer, provider: SmtpProvider) -> None:
    msg = message(1, {"body": "plain", "html": "<b>rich</b>"}, provider="mail", key="k")
    assert (await provider.send(msg)).outcome is Outcome.DELIVERED
    [received] = mail.mailbox.received
    html = received.get_body(("html",))
    assert html is not None
    assert html.get_content().strip() == "<b>rich</b>"
    assert received["Subject"] == ""


async def test_sends_share_one_connection(mail: MailServer, provider: SmtpProvider) -> None:
    results = await asyncio.gather(*(provider.send(order(i)) for i in range(5)))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert len(mail.mailbox.received) == 5
    assert len(mail.sessions) == 1
    assert provider.connections == 1


@pytest.mark.parametrize("settle", [True, False])
async def test_a_dropped_connection_is_opened_again(
    mail: MailServer, provider: SmtpProvider, settle: bool
) -> None:
    assert (await provider.send(order(1))).outcome is Outcome.DELIVERED
    mail.drop_connections()
    if settle:  # the client notices the drop before the next send; otherwise during it
        await asyncio.sleep(0.05)
    assert (await provider.send(order(2))).outcome is Outcome.DELIVERED
    assert [m["Message-ID"] for m in mail.mailbox.received] == [
        "<omnipost.acme.order-1@omnipost.test>",
        "<omnipost.acme.order-2@omnipost.test>",
    ]
    assert provider.connections == 2


@pytest.mark.parametrize(
    ("stage", "reply", "outcome"),
    [
        ("data", "421 4.7.0 Too many messages, slow down", Outcome.THROTTLED),
        ("rcpt", "451 4.7.1 Greylisted, try again later", Outcome.THROTTLED),
        ("rcpt", "452 4.2.2 Mailbox full", Outcome.TRANSIENT),
        ("data", "554 5.7.1 Message rejected as spam", Outcome.PERMANENT),
        ("rcpt", "550 5.1.1 <ADDRESS>: Recipient address rejected", Outcome.PERMANENT),
    ],
)
async def test_reply_codes_map_to_outcomes(
    mail: MailServer, provider: SmtpProvider, stage: str, reply: str, outcome: Outcome
) -> None:
    if stage == "rcpt":
        mail.mailbox.rcpt_reply = lambda address: reply.replace("ADDRESS", address)
    else:
        mail.mailbox.data_reply = lambda _: reply
    result = await provider.send(order())
    assert result.outcome is outcome
    assert result.detail.startswith(f"SMTP {reply[:3]}: ")
    assert RECIPIENT not in result.detail
    assert result.retry_after_s == (60.0 if outcome is Outcome.THROTTLED else None)
    assert mail.mailbox.received == []
    setattr(mail.mailbox, f"{stage}_reply", lambda _: None)
    assert (await provider.send(order())).outcome is Outcome.DELIVERED
    assert len(mail.mailbox.received) == 1


async def test_a_refused_recipient_never_appears_in_the_detail(
    mail: MailServer, provider: SmtpProvider
) -> None:
    mail.mailbox.rcpt_reply = lambda address: f"550 5.1.1 <{address}>: unknown user {address}"
    result = await provider.send(order(recipient="Bob Smith <BOB@Example.com>"))
    # 5.1.1: the mailbox does not exist, a hard bounce: the recipient is suppressed.
    assert result == result.gone("SMTP 550: 5.1.1 <<recipient>>: unknown user <recipient>")


@pytest.mark.parametrize(
    ("reply", "gone"),
    [
        ("550 5.1.10 null MX", True),
        ("550 5.1.1 no such user", True),
        ("550 5.7.1 relaying denied", False),  # the sender's problem, not the mailbox's
        ("552 5.2.2 mailbox full", False),
        ("550 no enhanced code", False),
    ],
)
async def test_only_a_missing_mailbox_suppresses_the_recipient(
    mail: MailServer, provider: SmtpProvider, reply: str, gone: bool
) -> None:
    mail.mailbox.rcpt_reply = lambda _: reply
    result = await provider.send(order())
    assert (result.outcome, result.recipient_gone) == (Outcome.PERMANENT, gone)


async def test_an_address_that_is_not_one_is_permanent_without_connecting(
    mail: MailServer, provider: SmtpProvider
) -> None:
    result = await provider.send(order(recipient="not an address"))
    assert result.outcome is Outcome.PERMANENT
    assert "not an email address" in result.detail
    assert mail.sessions == []


async def test_no_server_is_unavailable() -> None:
    """Nothing listening is the provider's fault, not the message's: no attempt is spent."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    smtp = SmtpProvider("mail", "127.0.0.1", "me@x.test", port=port, security="none")
    result = await smtp.send(order())
    assert result.outcome is Outcome.UNAVAILABLE
    assert result.is_provider_fault
    assert result.detail.startswith("SMTPConnectError")
    assert RECIPIENT not in result.detail
    await smtp.aclose()


async def test_aclose_says_quit_and_is_safe_twice(mail: MailServer, provider: SmtpProvider) -> None:
    await provider.send(order())
    assert "connected" in repr(provider)
    await provider.aclose()
    await provider.aclose()
    assert ", idle," in repr(provider)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("order-7", "<omnipost.acme.order-7@x.test>"),
        ("a.b", "<omnipost.acme.a=2Eb@x.test>"),
        ("a=2Eb", "<omnipost.acme.a=3D2Eb@x.test>"),  # escaping stays one-to-one
        ("<evil>@x", "<omnipost.acme.=3Cevil=3E=40x@x.test>"),
        ("é", "<omnipost.acme.=C3=A9@x.test>"),
        ("k" * 161, "<omnipost.acme.h" + "HASH" + "@x.test>"),
    ],
)
def test_message_id(key: str, expected: str) -> None:
    made = message_id("acme", key, "x.test")
    if "HASH" in expected:
        assert made.startswith("<omnipost.acme.h") and len(made) == len(expected) - 4 + 64
    else:
        assert made == expected


@dataclass(frozen=True)
class Tls:
    ca_file: str
    server: ssl.SSLContext


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """A private CA and a certificate it signed for 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "OmniPost test CA")])
    ca_usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
    ca = (
        x509.CertificateBuilder(ca_name, ca_name, ca_key.public_key(), 1, now, now + DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ca_usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    cert = (
        x509.CertificateBuilder(ca_name, name, key.public_key(), 2, now, now + DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(LOOPBACK)]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(aki, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "ca.pem").write_bytes(ca.public_bytes(Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return Tls(str(folder / "ca.pem"), server)


def check_login(
    server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
) -> AuthResult:
    assert isinstance(data, LoginPassword)
    ok = (data.login, data.password) == (b"me", b"hunter2")
    return AuthResult(success=ok, handled=False)  # let aiosmtpd answer 535 on failure


@pytest.mark.parametrize(
    ("password", "trusted", "outcome", "detail"),
    [
        ("hunter2", True, Outcome.DELIVERED, "accepted: "),
        # a failed login or an untrusted certificate stops every message alike: the provider's
        ("wrong", True, Outcome.UNAVAILABLE, "SMTP 535: "),
        ("hunter2", False, Outcome.UNAVAILABLE, "SSLCertVerificationError: "),
    ],
)
async def test_starttls_and_login_against_a_server_that_requires_both(
    tls: Tls, password: str, trusted: bool, outcome: Outcome, detail: str
) -> None:
    mail = MailServer(
        tls_context=tls.server,
        require_starttls=True,
        auth_required=True,
        authenticator=check_login,
    )
    async with mail:
        options = {"host": "127.0.0.1", "port": str(mail.port), "from": "me@omnipost.test"}
        if trusted:
            options["ca_file"] = tls.ca_file
        config = ProviderConfig("mail", "smtp", options, {"username": "me", "password": password})
        smtp = SmtpProvider.from_config(config)
        try:
            result = await smtp.send(order())
        finally:
            await smtp.aclose()
    assert result.outcome is outcome
    assert result.is_provider_fault is (outcome is Outcome.UNAVAILABLE)
    assert result.detail.startswith(detail)
    assert "hunter2" not in result.detail
    assert len(mail.mailbox.received) == (outcome is Outcome.DELIVERED)


def smtp_config(options: dict[str, str], secrets: dict[str, str] | None = None) -> ProviderConfig:
    return ProviderConfig("mail", "smtp", options, secrets or {})


BASE = {"host": "smtp.example.com", "from": "me@example.com"}


@pytest.mark.parametrize(
    ("options", "secrets", "fragment"),
    [
        ({"from": "me@example.com"}, {}, "option 'host' is required."),
        ({**BASE, "host": "smtp://x"}, {}, "option 'host' must be a host name"),
        ({"host": "x"}, {}, "option 'from' is required."),
        ({**BASE, "from": "me"}, {}, "option 'from' must be an email address"),
        ({**BASE, "port": "0"}, {}, "option 'port' must be a whole number from 1 to 65535, not 0"),
        ({**BASE, "port": "70000"}, {}, "option 'port' must be a whole number from 1 to 65535"),
        ({**BASE, "port": "smtp"}, {}, "option 'port' must be a whole number"),
        ({**BASE, "security": "ssl"}, {}, "option 'security' must be one of starttls, tls, none"),
        ({**BASE, "timeout_s": "-1"}, {}, "option 'timeout_s' must be a number above 0"),
        ({**BASE, "tls": "yes"}, {}, "option 'tls' is not known to a smtp provider."),
        (BASE, {"password": "hunter2"}, "secret 'username' is needed with the other one."),
        (BASE, {"username": "me"}, "secret 'password' is needed with the other one."),
        (
            {**BASE, "security": "none"},
            {"username": "me", "password": "hunter2"},
            "option 'security' must be starttls or tls when a password is set.",
        ),
    ],
)
def test_bad_options_are_refused_without_showing_secrets(
    options: dict[str, str], secrets: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=r"^provider 'mail': ") as caught:
        SmtpProvider.from_config(smtp_config(options, secrets))
    assert fragment in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("security", "port"), [("starttls", 587), ("tls", 465), ("none", 25), ("STARTTLS", 587)]
)
def test_the_default_port_follows_security(security: str, port: int) -> None:
    smtp = SmtpProvider.from_config(smtp_config({**BASE, "security": security}))
    assert smtp.port == port


def test_repr_hides_credentials() -> None:
    config = smtp_config(BASE, {"username": "me", "password": "hunter2"})
    shown = repr(SmtpProvider.from_config(config))
    assert shown == (
        "SmtpProvider(name='mail', smtp.example.com:587 starttls, login, idle, connections=0)"
    )
