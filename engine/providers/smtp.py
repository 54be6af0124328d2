"""A provider that sends each notification as an email over SMTP (aiosmtplib).

Options
    ``host`` (required), ``security`` = ``starttls`` (default; STARTTLS is required, not
    opportunistic), ``tls`` (implicit TLS) or ``none``; ``port`` (1-65535; default 587 for
    starttls, 465 for tls, 25 for none), ``from`` (required; ``Name <addr@example.com>`` or a
    bare address), ``timeout_s`` (default 30, for each SMTP command), ``retry_after_s``
    (default 60: how long a throttled send waits, SMTP having no Retry-After), ``ca_file``
    (a PEM file of CA certificates to trust instead of the system's, for a private relay).
Secrets
    ``username`` and ``password``, both or neither; refused with ``security`` = ``none``, which
    would send them in clear. Certificates are always verified.

The email: ``From`` the ``from`` option, ``To`` the recipient, ``Subject`` from
``payload["subject"]``, a text body from ``payload["text"]`` (or ``payload["body"]``), an
HTML alternative from ``payload["html"]`` when present, and ``Message-ID``
``<omnipost.TENANT.KEY@DOMAIN>`` built from the tenant and the idempotency key (characters
other than letters, digits, ``-`` and ``_`` written as ``=XX``) and the ``from`` domain: every
redelivery of a notification carries the same Message-ID, so a receiver can spot it.

Replies: 421 and 451 throttled. Failures that are the server's, not the message's, count toward the
provider's circuit breaker: anything that stops a connection (refused, reset, DNS, TLS, no STARTTLS,
a refused greeting or EHLO, a failed login such as 535 or 530), a timeout or a dropped connection
are UNAVAILABLE (no attempt spent); a refused sender (MAIL FROM, 4xx or 5xx) is transient with
``provider_fault``. A refused recipient (550, 553) or a refused message (DATA) stays the message's:
5xx permanent (and the recipient suppressed when the enhanced status says its mailbox does not
exist, 5.1.1 or 5.1.10), 4xx transient. Sends share one connection, one at a time under a lock; a
connection the server dropped is opened again, and a send that finds its reused connection dead is
tried once more on a fresh one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import ssl
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import TYPE_CHECKING, Self

from engine.core.domain import Message, SendResult
from engine.core.errors import ConfigError
from engine.providers._options import redact
from engine.providers.base import ProviderConfig
from engine.providers.schema import OptionSpec, ProviderKind

if TYPE_CHECKING:  # imported when an SMTP provider first connects or fails: commands that
    import aiosmtplib  # send no email start without it

__all__ = ["KIND", "SPEC", "SmtpProvider", "message_id"]

KIND = "smtp"
SECURITY_MODES = ("starttls", "tls", "none")
_DEFAULT_PORT = {"starttls": 587, "tls": 465, "none": 25}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# RFC 3463's "bad destination mailbox address" and RFC 7505's "no mail accepted": a hard bounce.
_NO_MAILBOX = re.compile(r"\s*5\.1\.(?:1|10)\b")


def _escape(text: str) -> str:
    """Letters, digits, '-' and '_' kept; every other UTF-8 byte as '=XX' (so it is one-to-one
    and the result holds no '.', which separates the parts of a Message-ID)."""
    return _UNSAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), text)


def message_id(tenant: str, idempotency_key: str, domain: str) -> str:
    """The Message-ID of every delivery of one notification. A very long key is hashed."""
    key = _escape(idempotency_key)
    if not key or len(key) > 160:
        key = "h" + hashlib.sha256(idempotency_key.encode()).hexdigest()
    return f"<omnipost.{_escape(tenant)}.{key}@{domain}>"


def _address(text: str) -> str | None:
    """The bare address in ``text``, or None when it does not look like one."""
    _, addr = parseaddr(text)
    local, at, domain = addr.rpartition("@")
    if not at or not local or not domain or any(c.isspace() for c in addr):
        return None
    return addr


def _reason(exc: BaseException, recipient: str, to: str) -> str:
    """One line naming the error (a server's reply as ``SMTP 535: ...``), recipient masked."""
    import aiosmtplib

    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"SMTP {exc.code}: {redact(exc.message, recipient, to) or 'no reason given'}"
    return f"{type(exc).__name__}: {redact(str(exc), recipient, to) or 'no reason given'}"


class SmtpProvider:
    """Sends messages as emails through one SMTP server, reusing one connection."""

    def __init__(
        self,
        name: str,
        host: str,
        sender: str,
        *,
        port: int | None = None,
        security: str = "starttls",
        timeout_s: float = 30.0,
        retry_after_s: float = 60.0,
        username: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        envelope_from = _address(sender)
        if envelope_from is None:
            raise ConfigError(f"provider {name!r}: option 'from' must be an email address.")
        if security not in SECURITY_MODES:
            raise ConfigError(
                f"provider {name!r}: option 'security' must be one of {', '.join(SECURITY_MODES)}."
            )
        self.name = name
        self.host = host
        self.sender = sender
        self.security = security
        self.port = port if port is not None else _DEFAULT_PORT[security]
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._envelope_from = envelope_from
        self._domain = envelope_from.rpartition("@")[2]
        self._username = username
        self._password = password
        self.ca_file = ca_file
        self._tls_context: ssl.SSLContext | None = None
        self._smtp: aiosmtplib.SMTP | None = None
        self._lock = asyncio.Lock()
        self.connections = 0

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """Build from options and secrets; raises ``ConfigError`` naming the first bad one."""
        opts = SPEC.read(config)
        host = opts.text("host")
        if "://" in host or "/" in host or any(c.isspace() for c in host):
            raise opts.fail("host", "must be a host name or address, not a URL")
        sender = opts.text("from")
        if _address(sender) is None:
            raise opts.fail("from", "must be an email address such as 'OmniPost <me@example.com>'")
        security = opts.text("security")
        username = opts.text("username") or None
        password = opts.text("password") or None
        if (username is None) != (password is None):
            missing = "password" if password is None else "username"
            raise ConfigError(
                f"provider {config.name!r}: secret {missing!r} is needed with the other one."
            )
        if username is not None and security == "none":
            raise opts.fail("security", "must be starttls or tls when a password is set")
        ca_file = opts.text("ca_file") or None
        if ca_file is not None and not os.path.isfile(ca_file):
            raise opts.fail("ca_file", "names no file")
        return cls(
            config.name,
            host,
            sender,
            port=opts.integer("port"),
            security=security,
            timeout_s=opts.number("timeout_s"),
            retry_after_s=opts.number("retry_after_s"),
            username=username,
            password=password,
            ca_file=ca_file,
        )

    def build(self, message: Message) -> EmailMessage:
        """The email for ``message``. Raises ``ValueError`` for a header it cannot carry."""
        payload = message.payload
        email = EmailMessage()
        email["From"] = self.sender
        email["To"] = message.recipient
        email["Subject"] = str(payload.get("subject", ""))
        email["Date"] = formatdate(usegmt=True)
        email["Message-ID"] = message_id(message.tenant, message.idempotency_key, self._domain)
        email.set_content(str(payload.get("text", payload.get("body", ""))))
        if payload.get("html"):
            email.add_alternative(str(payload["html"]), subtype="html")
        return email

    async def send(self, message: Message) -> SendResult:
        """Send ``message`` as one email. Never raises for a delivery problem."""
        to = _address(message.recipient)
        if to is None:
            return SendResult.permanent("the recipient is not an email address")
        try:
            email = self.build(message)
        except ValueError as exc:
            reason = redact(str(exc), message.recipient, to)
            return SendResult.permanent(f"cannot build the email: {reason}")
        async with self._lock:
            try:
                return await self._deliver(email, to, message.recipient)
            except asyncio.CancelledError:
                self._drop()  # the transaction's state on the server is unknown
                raise

    async def _deliver(self, email: EmailMessage, to: str, recipient: str) -> SendResult:
        import aiosmtplib  # loaded by the first connection; a lookup from then on

        for tries_left in (1, 0):
            reused = self._smtp is not None and self._smtp.is_connected
            try:
                smtp = await self._connection()
            except (aiosmtplib.SMTPException, OSError) as exc:  # nothing about the message yet
                self._drop()
                return SendResult.unavailable(_reason(exc, recipient, to))
            try:
                _, reply = await smtp.send_message(
                    email, sender=self._envelope_from, recipients=[to]
                )
            except aiosmtplib.SMTPRecipientsRefused as exc:
                first = exc.recipients[0]
                return self._reply(first.code, first.message, recipient, to)
            except aiosmtplib.SMTPSenderRefused as exc:  # refuses every message alike
                return self._reply(exc.code, exc.message, recipient, to, server=True)
            except aiosmtplib.SMTPResponseException as exc:
                return self._reply(exc.code, exc.message, recipient, to)
            except aiosmtplib.SMTPServerDisconnected as exc:
                self._drop()
                if not (reused and tries_left):
                    reason = redact(str(exc), recipient, to)
                    return SendResult.unavailable(f"server disconnected: {reason}")
            except (aiosmtplib.SMTPTimeoutError, ConnectionError) as exc:
                self._drop()
                return SendResult.unavailable(_reason(exc, recipient, to))
            except (aiosmtplib.SMTPException, OSError) as exc:  # e.g. no SMTPUTF8 for this one
                self._drop()
                return SendResult.transient(_reason(exc, recipient, to))
            else:
                return SendResult.delivered(redact(f"accepted: {reply}", recipient, to))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self) -> aiosmtplib.SMTP:
        import aiosmtplib

        if self._smtp is not None and self._smtp.is_connected:
            return self._smtp
        if self._tls_context is None and self.security != "none":
            # built once (it reads certificate files), not on every reconnect
            self._tls_context = await asyncio.to_thread(
                ssl.create_default_context, cafile=self.ca_file
            )
        smtp = aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            timeout=self.timeout_s,
            use_tls=self.security == "tls",
            start_tls=self.security == "starttls",
            validate_certs=True,
            tls_context=self._tls_context,
            username=self._username,
            password=self._password,
        )
        await smtp.connect()
        self._smtp = smtp
        self.connections += 1
        return smtp

    def _reply(
        self, code: int, text: str, recipient: str, to: str, *, server: bool = False
    ) -> SendResult:
        """The outcome of a reply; ``server``: a reply that refuses every message alike."""
        detail = f"SMTP {code}: {redact(text, recipient, to)}"
        if code in (421, 451):
            return SendResult.throttled(self.retry_after_s, detail)
        if server:
            return SendResult.transient(detail, provider_fault=True)
        if 500 <= code < 600:
            if _NO_MAILBOX.match(text):  # a hard bounce: suppressed from now on
                return SendResult.gone(detail)
            return SendResult.permanent(detail)
        return SendResult.transient(detail)

    def _drop(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            smtp.close()

    async def aclose(self) -> None:
        """Say QUIT and close the connection; safe to call twice."""
        async with self._lock:
            smtp, self._smtp = self._smtp, None
            if smtp is None:
                return
            import aiosmtplib  # it connected: loaded

            try:
                if smtp.is_connected:
                    await smtp.quit(timeout=min(self.timeout_s, 5.0))
            except (aiosmtplib.SMTPException, OSError):
                pass
            finally:
                smtp.close()

    def __repr__(self) -> str:
        state = "connected" if self._smtp is not None and self._smtp.is_connected else "idle"
        login = ", login" if self._username else ""
        return (
            f"SmtpProvider(name={self.name!r}, {self.host}:{self.port} {self.security}{login}, "
            f"{state}, connections={self.connections})"
        )


OPTIONS = (
    OptionSpec("host", required=True, help="the SMTP server's host name or address"),
    OptionSpec("from", required=True, help="the sender: 'Name <me@example.com>' or an address"),
    OptionSpec(
        "security",
        "choice",
        "starttls",
        choices=SECURITY_MODES,
        help="starttls (required, not opportunistic), tls (implicit) or none",
    ),
    OptionSpec(
        "port", "integer", low=1, high=65535, help="587 for starttls, 465 for tls, 25 for none"
    ),
    OptionSpec("timeout_s", "number", 30.0, above_low=True, high=600, help="per SMTP command"),
    OptionSpec(
        "retry_after_s", "number", 60.0, high=86_400, help="how long a throttled send waits"
    ),
    OptionSpec("ca_file", help="a PEM file of CA certificates to trust instead of the system's"),
    OptionSpec("username", secret=True, help="login, with password; never with security none"),
    OptionSpec("password", secret=True, help="login, with username"),
)
SPEC = ProviderKind(KIND, "sends each notification as an email", OPTIONS, SmtpProvider.from_config)
