"""End to end: a real Engine dispatches through the webhook provider to a real HTTP server on
127.0.0.1 that answers 200, 429 (Retry-After in seconds and as an HTTP date), 5xx then 200,
and 400, and verifies every signature. Runs on SQLite and on Postgres (the ``store`` fixture).
"""

from __future__ import annotations

import gc
import json
import time
from collections import Counter
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path

import pytest

from app.cli import main
from engine import Engine, EnqueueItem, Limit, NotificationState, NotificationView, Store
from engine.providers import verify_signature
from engine.providers.webhook import parse_retry_after
from testkit.servers import (
    Answer,
    Reply,
    Request,
    Script,
    ScriptedServer,
    ThreadedServer,
    fast_engine,
)

SECRET = "whsec-e2e-3b8f0c1d9a7e"
TENANTS = ("acme", "globex")
PER_TENANT = 50
CONCURRENCY = 8
MAX_ATTEMPTS = 2  # a 429 that spent an attempt would kill "acme-02", throttled twice
# A request already on its way when a 429 was answered still arrives; later ones must not.
IN_FLIGHT_GRACE_S = 0.15

OK = Reply(200, body=b'{"ok": true}')
RETRY_1S = Reply(429, {"Retry-After": "1"})


def retry_at_date(_: Request) -> Reply:
    """429 until an HTTP date about 2 s ahead (whole seconds: between 1 and 2 s from now)."""
    return Reply(429, {"Retry-After": formatdate(time.time() + 2, usegmt=True)})


THROTTLED_ONCE = ("acme-00", "acme-01", "acme-03")
THROTTLED_TWICE = ("acme-02",)
FAILED_ONCE = ("acme-10", "globex-10", "globex-11")
REFUSED = "globex-20"

PLANS: dict[str, Script] = {
    "acme-00": [RETRY_1S, OK],
    "acme-01": [RETRY_1S, OK],
    "acme-02": [RETRY_1S, RETRY_1S, OK],
    "acme-03": [retry_at_date, OK],
    "acme-10": [Reply(500, body=b"boom"), OK],
    "globex-10": [Reply(503), OK],
    "globex-11": [Reply(500), Reply(202)],
    REFUSED: [Reply(400, body=b'{"error": "unknown user"}')],
}


def key(tenant: str, n: int) -> str:
    return f"{tenant}-{n:02d}"


class Receiver:
    """What an operator's endpoint does: verify the signature over the raw body, then answer
    from the plan of the request's Idempotency-Key (200 when it has none)."""

    def __init__(self, plans: dict[str, Script]) -> None:
        self.plans = plans
        self.tries: Counter[str] = Counter()
        self.verified = 0
        self.refused: list[Request] = []

    def __call__(self, request: Request) -> Reply:
        header = request.headers.get("omnipost-signature", "")
        if not verify_signature(SECRET, header, request.body):
            self.refused.append(request)
            return Reply(401)
        self.verified += 1
        idem = request.headers["idempotency-key"]
        n = self.tries[idem]
        self.tries[idem] += 1
        plan = self.plans.get(idem, [OK])
        step = plan[min(n, len(plan) - 1)]
        return step(request) if callable(step) else step


async def notifications(engine: Engine) -> dict[str, NotificationView]:
    found: dict[str, NotificationView] = {}
    for tenant in TENANTS:
        for view in await engine.notifications(tenant, limit=1000):
            found[view.idempotency_key] = view
    return found


def hold_s(answer: Answer) -> float:
    """How long the 429 ``answer`` asked the sender to wait, as the server saw it."""
    return parse_retry_after(answer.reply.headers.get("Retry-After"), answer.wall)


@pytest.fixture
def settled_heap() -> Iterator[None]:
    """The test server shares the engine's event loop, and times a request when it reads it. In
    a process that has run a thousand tests before this one, a full garbage collection of
    their leftovers stalls that loop for up to a third of a second (measured: 273-326 ms, the
    five longest in the first half of the suite), and requests sent before a 429 are then read
    after it, inside its quiet period. Those objects are set aside (``gc.freeze``) for the
    test: a worker's own heap is small, and this test is about the engine, not the collector."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def quiet_violations(server: ScriptedServer, path: str) -> list[tuple[float, float]]:
    """(429 time, request time) for each request to ``path`` that arrived while a 429's
    Retry-After was running, past the grace for requests already in flight."""
    found = []
    for answer in server.answers:
        if answer.request.path != path or answer.reply.status != 429:
            continue
        start, end = answer.at + IN_FLIGHT_GRACE_S, answer.at + hold_s(answer) - 0.1
        found += [
            (answer.at, r.at) for r in server.requests if r.path == path and start < r.at < end
        ]
    return found


@pytest.mark.usefixtures("settled_heap")
async def test_every_notification_is_delivered_once_through_429s_5xx_and_a_400(
    store: Store,
) -> None:
    receiver = Receiver(PLANS)
    async with (
        ScriptedServer({"/hook": [receiver]}) as server,
        fast_engine(store, concurrency=CONCURRENCY, max_attempts=MAX_ATTEMPTS) as engine,
    ):
        await engine.provider_add(
            "hook",
            "webhook",
            options={"url": server.url("/hook"), "timeout_s": "5"},
            secrets={"signing_key": SECRET},
        )
        for tenant in TENANTS:
            await engine.tenant_add(tenant)
            items: list[EnqueueItem] = [
                EnqueueItem("hook", f"user{n}@{tenant}.example", {"n": n}, key(tenant, n))
                for n in range(PER_TENANT)
            ]
            await engine.enqueue_many(tenant, items)
        started = time.monotonic()
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30, poll_s=0.05)
        elapsed = time.monotonic() - started
        views = await notifications(engine)

    # The receiver verified every signature; nothing was refused for a bad one.
    assert receiver.refused == []
    assert receiver.verified == len(server.requests)
    for request in server.requests:
        body = json.loads(request.body)
        assert request.headers["idempotency-key"] == key(body["tenant"], body["payload"]["n"])

    # Delivered exactly once each at the receiver: one 2xx answer per Idempotency-Key.
    all_keys = {key(t, n) for t in TENANTS for n in range(PER_TENANT)}
    assert set(views) == all_keys
    deliverable = all_keys - {REFUSED}
    ok_answers = Counter(
        a.request.headers["idempotency-key"] for a in server.answers if 200 <= a.reply.status < 300
    )
    assert ok_answers == Counter(dict.fromkeys(deliverable, 1))

    delivered = {k for k, v in views.items() if v.state is NotificationState.DELIVERED}
    assert delivered == deliverable

    # 429s spent no attempt, even throttled twice with max_attempts=2; 5xx spent one each.
    for k in deliverable:
        expected = 1 if k in FAILED_ONCE else 0
        assert views[k].failures == expected, (k, views[k])
    assert {k: receiver.tries[k] for k in THROTTLED_ONCE} == dict.fromkeys(THROTTLED_ONCE, 2)
    assert {k: receiver.tries[k] for k in THROTTLED_TWICE} == dict.fromkeys(THROTTLED_TWICE, 3)
    assert {k: receiver.tries[k] for k in FAILED_ONCE} == dict.fromkeys(FAILED_ONCE, 2)

    # The 400 is dead at once with its reason, tried only once.
    refused = views[REFUSED]
    assert refused.state is NotificationState.DEAD
    assert refused.last_error is not None
    assert refused.last_error.startswith("HTTP 400 Bad Request")
    assert "unknown user" in refused.last_error
    assert receiver.tries[REFUSED] == 1
    assert refused.failures == 0

    # Each 429 held every worker back for its Retry-After (both forms were used).
    throttles = [a for a in server.answers if a.reply.status == 429]
    assert len(throttles) == 5
    assert any(a.reply.headers["Retry-After"] == "1" for a in throttles)
    assert any(a.reply.headers["Retry-After"].endswith(" GMT") for a in throttles)
    assert quiet_violations(server, "/hook") == []
    first = min(a.at for a in throttles)
    assert any(r.at > first + 1.0 for r in server.requests)  # work was waiting meanwhile
    assert elapsed >= 2.0  # acme-02 waited out two Retry-After: 1 in a row


@pytest.mark.usefixtures("settled_heap")
async def test_a_429_holds_back_every_worker_of_that_provider_only(store: Store) -> None:
    """Concurrency 8: after the first 429 (Retry-After: 1) no request reaches that provider's
    endpoint for ~0.9 s, while another provider keeps delivering meanwhile."""
    answered: list[str] = []

    def first_only(request: Request) -> Reply:
        answered.append(request.headers["idempotency-key"])
        return RETRY_1S if len(answered) == 1 else OK

    async with (
        ScriptedServer({"/hook": [first_only], "/other": [OK]}) as server,
        fast_engine(store, concurrency=CONCURRENCY, max_attempts=1) as engine,
    ):
        await engine.tenant_add("acme")
        await engine.provider_add("hook", "webhook", options={"url": server.url("/hook")})
        # 40 sends at 30/s (burst 5) span over a second: some fall inside hook's hold.
        await engine.provider_add(
            "other", "webhook", Limit(30, 5), options={"url": server.url("/other")}
        )
        items: list[EnqueueItem] = [
            EnqueueItem(provider, f"u{n}@acme.example", {}, f"{provider}-{n}")
            for n in range(40)
            for provider in ("hook", "other")
        ]
        await engine.enqueue_many("acme", items)
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30, poll_s=0.05)
        views = {v.idempotency_key: v for v in await engine.notifications("acme", limit=1000)}

    assert {v.state for v in views.values()} == {NotificationState.DELIVERED}
    assert all(v.failures == 0 for v in views.values())  # max_attempts=1: a spent one is dead
    [throttle] = [a for a in server.answers if a.reply.status == 429]
    assert quiet_violations(server, "/hook") == []
    hook_times = sorted(r.at for r in server.requests if r.path == "/hook")
    in_grace = [t for t in hook_times if throttle.at < t <= throttle.at + IN_FLIGHT_GRACE_S]
    assert len(in_grace) <= CONCURRENCY - 1  # only sends already under way
    assert hook_times[-1] >= throttle.at + 0.9  # the rest went after the hold
    during = [
        r.at
        for r in server.requests
        if r.path == "/other" and throttle.at + IN_FLIGHT_GRACE_S < r.at < throttle.at + 0.9
    ]
    assert during, "the other provider was held back too"


def test_cli_provider_test_against_the_local_server_never_shows_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    for name in ("OMNIPOST_DB", "OMNIPOST_KEYS"):
        monkeypatch.delenv(name, raising=False)
    db_file = tmp_path / "cli.db"
    outputs: list[str] = []

    def omnipost(*argv: str) -> tuple[int, str]:
        code = main([*argv, "--db", f"sqlite:///{db_file}"])
        out, err = capsys.readouterr()
        outputs.append(out + err)
        assert err == "", err
        return code, out

    receiver = Receiver({})
    scripts: dict[str, Script] = {"/ok": [receiver], "/error": [Reply(500, body=b"boom")]}
    with ThreadedServer(scripts) as http:
        assert omnipost("migrate")[0] == 0
        for name, path in (("hook", "/ok"), ("broken", "/error")):
            code, _ = omnipost(
                "provider",
                "add",
                name,
                "--kind",
                "webhook",
                "--option",
                f"url={http.url(path)}",
                "--secret",
                f"signing_key={SECRET}",
            )
            assert code == 0
        code, out = omnipost("provider", "test", "hook", "bob@example.com")
        assert code == 0
        assert out.count("\n") == 1
        assert ": delivered (HTTP 200 OK)" in out
        assert "bob@example.com" not in out
        code, out = omnipost("provider", "test", "broken", "bob@example.com")
        assert code == 1
        assert out.count("\n") == 1
        assert ": transient (HTTP 500 Internal Server Error: boom)" in out
        code, table = omnipost("provider", "list")
        assert code == 0
        code, listed = omnipost("provider", "list", "--json")
        assert code == 0

    # The receiver got the test send, signed with the configured key.
    assert [r.path for r in http.server.requests] == ["/ok", "/error"]
    assert receiver.verified == 1
    assert receiver.refused == []
    assert http.server.requests[0].headers["idempotency-key"].startswith("test-")

    # The secret is named but masked in both listings, and shown nowhere else.
    assert "signing_key=********" in table
    by_name = {p["name"]: p for p in json.loads(listed)}
    assert by_name["hook"]["secrets"] == {"signing_key": "********"}
    assert by_name["hook"]["options"] == {"url": http.url("/ok")}
    assert all(SECRET not in text for text in outputs)
    # ... nor stored in clear.
    for stored in tmp_path.glob("cli.db*"):
        assert SECRET.encode() not in stored.read_bytes()
