"""Loopback Twilio, FCM and APNs for runs through ``omnipost worker`` processes and the CLI.

The servers and the vendors' checks are the unit tests' own (``test_provider_twilio``,
``test_provider_fcm``, ``test_provider_apns``): Twilio over HTTP/1.1 with Basic auth checked,
Google's token endpoint checking the JWT's RS256 signature with the service account's public
key, APNs over HTTP/2 and TLS (ALPN ``h2``, a test certificate the provider trusts through
``ca_file``) checking the ES256 JWT. Here they run on an event loop of their own thread
(``BackgroundLoop``), so they keep answering while the test waits on a worker process or runs
the CLI in-process; each answers a recipient from its ``Plans`` (a 429 first, a 503 first, a
400, the vendor's "gone for good") once the request passed the vendor's checks, and records
every send as a ``Hit``. Also the two steps of a run: ``enqueue`` through the CLI and
``run_worker``, a worker process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import subprocess
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, Self, TypeVar
from urllib.parse import parse_qs

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from testkit import apple as apns
from testkit import google as fcm
from testkit import twilio
from testkit.cli import Cli, clean_env, start_worker
from testkit.servers import Reply, Request, ScriptedServer

__all__ = [
    "KINDS",
    "STEP_STATUS",
    "ApnsLoopback",
    "BackgroundLoop",
    "FcmLoopback",
    "Hit",
    "Loopback",
    "Plans",
    "Step",
    "TwilioLoopback",
    "enqueue",
    "provider_flags",
    "run_worker",
]

T = TypeVar("T")
KINDS = ("twilio", "fcm", "apns")
Step = Literal["throttle", "fail", "refuse", "gone"]
# Every kind answers these steps with the same status: throttled, transient, permanent. "gone"
# (the recipient is gone for good: permanent, and suppressed) has each vendor's own status and
# code, the loopback's ``gone``.
STEP_STATUS: dict[Step, int] = {"throttle": 429, "fail": 503, "refuse": 400}
Options = tuple[dict[str, str], dict[str, str]]  # a provider's options and secrets
PAYLOAD = {"title": "Order 42", "body": "Your order is on its way."}  # SMS text, push alert


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def provider_flags(options: Options) -> list[str]:
    """``--option K=V`` and ``--secret K=V`` for ``omnipost provider add``."""
    opts, secrets = options
    return [
        *(f for k, v in opts.items() for f in ("--option", f"{k}={v}")),
        *(f for k, v in secrets.items() for f in ("--secret", f"{k}={v}")),
    ]


def enqueue(cli: Cli, folder: Path, items: list[tuple[str, str, str]]) -> None:
    """Enqueue (key, provider, recipient) items of tenant ``acme`` from a batch file."""
    batch = folder / "batch.jsonl"
    lines = (
        json.dumps({"tenant": "acme", "provider": p, "recipient": r, "payload": PAYLOAD, "key": k})
        for k, p, r in items
    )
    batch.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert cli.ok("enqueue", "--file", str(batch)).startswith(f"queued {len(items)},")


def run_worker(folder: Path, store_url: str, concurrency: int) -> tuple[int, str]:
    """``omnipost worker --until-empty`` on ``store_url`` with the keys of the data directory
    ``folder`` (the ``cli`` fixture's); its exit code and output, once it has stopped."""
    log = folder / "worker.log"
    env = clean_env(folder, OMNIPOST_DB=store_url)
    args = ["--quiet", "--until-empty", "--concurrency", str(concurrency)]
    worker = start_worker(args, env, log)
    try:
        code = worker.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not stop: {log.read_text()}")
    finally:
        worker.kill()
        worker.wait()
    return code, log.read_text()


class BackgroundLoop:
    """An event loop on a thread of its own. ``enter`` opens an async context manager on it and
    returns what it yields; leaving closes them all, last first, then stops the loop. While it
    runs it notes each time it was late (the thread or the whole process held up, say by a
    collection over a long test session's heap: a server on it then reads what reached it
    meanwhile all at once), for ``stall_s``."""

    _TICK_S = 0.01

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="loopback", daemon=True)
        self._stack = contextlib.AsyncExitStack()
        self._stalls: list[tuple[float, float]] = []  # (when it ended, how late), loop time
        self._watch: concurrent.futures.Future[None] | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        self._watch = asyncio.run_coroutine_threadsafe(self._watch_stalls(), self._loop)
        return self

    async def _watch_stalls(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self._TICK_S)
            now = loop.time()
            late_s = now - before - self._TICK_S
            if late_s > self._TICK_S:
                self._stalls.append((now, late_s))

    def stall_s(self, start: float, end: float) -> float:
        """The longest the loop was late in a stall that ended between ``start`` and ``end``
        (loop time, as a ``Hit.at``); 0 when it was never late by more than a tick."""
        return max((late_s for at, late_s in self._stalls if start <= at <= end), default=0.0)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait (30 s at most) for what it returns."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def enter(self, manager: contextlib.AbstractAsyncContextManager[T]) -> T:
        return self.run(self._stack.enter_async_context(manager))

    def __exit__(self, *exc: object) -> None:
        try:
            if self._watch is not None:
                self._watch.cancel()
            self.run(self._stack.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


@dataclass(frozen=True, slots=True)
class Hit:
    """A send request that passed the vendor's checks, or was refused by them."""

    recipient: str
    status: int
    at: float  # the server loop's monotonic time when the request was read


class Plans:
    """The steps a recipient's tries are answered with, one per try; past its last step (or
    with none) a recipient gets the vendor's own answer."""

    def __init__(self, steps: dict[str, list[Step]] | None = None) -> None:
        self.steps = steps or {}
        self.tries: Counter[str] = Counter()

    def next(self, recipient: str) -> Step | None:
        n = self.tries[recipient]
        self.tries[recipient] += 1
        steps = self.steps.get(recipient, [])
        return steps[n] if n < len(steps) else None


class Loopback(Protocol):
    kind: str
    ok_status: int
    plans: Plans
    secrets: tuple[str, ...]  # texts that must never show in an output
    gone: tuple[int, str]  # the status and vendor code of the "gone" step

    def start(self, loop: BackgroundLoop, folder: Path) -> None: ...

    def options(self, *, locked: bool = False) -> Options:
        """A provider's options pointing at this server; ``locked``: with credentials that the
        server refuses (the provider is then unavailable)."""
        ...

    def recipient(self, n: int) -> str: ...

    def hits(self) -> list[Hit]: ...


# -- Twilio ------------------------------------------------------------------------------------

LOCKED_TWILIO_TOKEN = "twilio-wrong-token-0002"


def _to(request: Request) -> str:
    return parse_qs(request.body.decode())["To"][0]


class TwilioLoopback:
    """Twilio's create-message endpoint (``test_provider_twilio.twilio``: Basic auth and the form
    checked, 401 20003 for a wrong token)."""

    kind = "twilio"
    ok_status = 201
    secrets: tuple[str, ...] = (twilio.TOKEN, LOCKED_TWILIO_TOKEN)
    STEPS: dict[Step, Reply] = {
        "throttle": twilio.error(429, 20429, "Too Many Requests", **{"Retry-After": "1"}),
        "fail": twilio.error(503, 20500, "Internal Server Error"),
        "refuse": twilio.error(400, 21211, "The 'To' number is not a valid phone number."),
        "gone": twilio.error(400, 21610, "Attempt to send to unsubscribed recipient"),  # STOP
    }
    gone = (400, "21610")

    def __init__(self, plans: Plans | None = None) -> None:
        self.plans = plans or Plans()
        self.server = ScriptedServer({twilio.PATH: [self._answer]})

    def start(self, loop: BackgroundLoop, folder: Path) -> None:
        loop.enter(self.server)

    def _answer(self, request: Request) -> Reply:
        answer = twilio.twilio(request)
        step = self.plans.next(_to(request)) if answer.status == 201 else None
        return self.STEPS[step] if step else answer

    def options(self, *, locked: bool = False) -> Options:
        opts = {
            "account_sid": twilio.ACCOUNT,
            "from": "+15550001111",
            "base_url": self.server.url(""),
        }
        return opts, {"auth_token": LOCKED_TWILIO_TOKEN if locked else twilio.TOKEN}

    def recipient(self, n: int) -> str:
        return f"+1555{n:07d}"

    def hits(self) -> list[Hit]:
        return [
            Hit(_to(a.request), a.reply.status, a.request.at)
            for a in self.server.answers
            if a.request.path == twilio.PATH
        ]


# -- FCM ---------------------------------------------------------------------------------------

OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
LOCKED_ACCOUNT = json.dumps(
    {"type": "service_account", "client_email": fcm.EMAIL, "private_key": _pem(OTHER_RSA)}
)


class FcmLoopback:
    """Google's token endpoint (``test_provider_fcm.Google``: the assertion's signature checked
    with the account's public key, so an account signed by another key is refused) and FCM's
    send, which takes any token the endpoint issued, except the first with ``revoke_first``."""

    kind = "fcm"
    ok_status = 200
    secrets: tuple[str, ...] = (fcm.ACCOUNT, fcm.PEM.splitlines()[1], LOCKED_ACCOUNT, "ya29.")
    STEPS: dict[Step, Reply] = {
        "throttle": fcm.error(
            429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "slow down", **{"Retry-After": "1"}
        ),
        "fail": fcm.error(503, "UNAVAILABLE", "UNAVAILABLE", "try later"),
        "refuse": fcm.error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "not a valid token"),
        "gone": fcm.error(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."),
    }
    gone = (404, "UNREGISTERED")

    def __init__(
        self, plans: Plans | None = None, *, lifetime_s: int = 3600, revoke_first: bool = False
    ) -> None:
        self.plans = plans or Plans()
        self.google = fcm.Google(lifetime_s=lifetime_s)
        self.revoke_first = revoke_first
        self.rejected: list[str] = []  # the bearer tokens answered 401
        self.server = ScriptedServer({"/token": [self.google.token], fcm.SEND: [self._send]})

    def start(self, loop: BackgroundLoop, folder: Path) -> None:
        loop.enter(self.server)
        self.google.audience = self.server.url("/token")

    def _send(self, request: Request) -> Reply:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        issued = self.google.issued
        if bearer not in issued or (self.revoke_first and bearer == issued[0]):
            self.rejected.append(bearer)
            return fcm.error(401, "UNAUTHENTICATED", None, "invalid authentication credentials")
        step = self.plans.next(request.json()["message"]["token"])
        if step:
            return self.STEPS[step]
        body = {"name": f"projects/demo-project/messages/0:{len(self.server.answers)}"}
        return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def options(self, *, locked: bool = False) -> Options:
        opts = {
            "project_id": "demo-project",
            "base_url": self.server.url(""),
            "token_url": self.server.url("/token"),
        }
        return opts, {"service_account": LOCKED_ACCOUNT if locked else fcm.ACCOUNT}

    def recipient(self, n: int) -> str:
        return f"fcm-device-token-{n:05d}"

    def hits(self) -> list[Hit]:
        """The sends answered by their outcome: not those refused for a revoked token (the
        provider fetches another and sends again, within one send)."""
        return [
            Hit(a.request.json()["message"]["token"], a.reply.status, a.request.at)
            for a in self.server.answers
            if a.request.path == fcm.SEND and a.reply.status != 401
        ]


# -- APNs --------------------------------------------------------------------------------------

OTHER_EC = ec.generate_private_key(ec.SECP256R1())
LOCKED_PEM = _pem(OTHER_EC)
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


class ApnsLoopback:
    """APNs (``test_provider_apns.Apple`` behind ``serving``: HTTP/2 over TLS with ALPN h2, the
    JWT checked with the key's public half, 403 InvalidProviderToken for any other key)."""

    kind = "apns"
    ok_status = 200
    secrets: tuple[str, ...] = (apns.PEM.splitlines()[1], LOCKED_PEM.splitlines()[1], "PRIVATE KEY")
    STEPS: dict[Step, apns.Answer] = {
        "throttle": (429, {"reason": "TooManyRequests"}),  # Apple's Retry-After: 4
        "fail": (503, {"reason": "ServiceUnavailable"}),
        "refuse": (400, {"reason": "BadDeviceToken"}),
        # the app was removed from the device: the last time (ms) the token was valid
        "gone": (410, {"reason": "Unregistered", "timestamp": 1_764_892_800_000}),
    }
    gone = (410, "Unregistered")

    def __init__(self, plans: Plans | None = None) -> None:
        self.plans = plans or Plans()
        self.seen: list[dict[str, Any]] = []  # each request as Apple saw it
        self._hits: list[Hit] = []
        self.url, self.ca = "", Path()

    def start(self, loop: BackgroundLoop, folder: Path) -> None:
        self.url, self.ca = loop.enter(apns.serving(self, folder))

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        at = asyncio.get_running_loop().time()
        device = scope["path"].rsplit("/", 1)[-1]
        bearer = dict(scope["headers"]).get(b"authorization", b"").decode()
        passed = apns.jwt_ok(bearer.removeprefix("bearer "))
        step = self.plans.next(device) if passed else None
        apple = apns.Apple([self.STEPS[step]] if step else [])  # checks, then answers
        status: list[int] = []

        async def answer(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.start":
                status.append(event["status"])
            await send(event)

        await apple(scope, receive, answer)
        self.seen += apple.seen
        self._hits.append(Hit(device, status[0], at))

    def options(self, *, locked: bool = False) -> Options:
        opts = {
            "team_id": apns.TEAM,
            "key_id": apns.KEY_ID,
            "topic": apns.TOPIC,
            "base_url": self.url,
            "ca_file": str(self.ca),
        }
        return opts, {"signing_key": LOCKED_PEM if locked else apns.PEM}

    def recipient(self, n: int) -> str:
        return f"{n:064x}"

    def hits(self) -> list[Hit]:
        return list(self._hits)
