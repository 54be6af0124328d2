"""Status events (issue 48): every change of a subscribed tenant's notifications reaches its
endpoint, signed by the Standard Webhooks rules, at least once.

A loopback receiver (testkit.servers.ScriptedServer) takes the posts; the ``standardwebhooks``
library (a dev dependency) verifies each one as a tenant's application would, the oracle for
the signing. Every test runs on SQLite and on Postgres (``store`` is parametrized).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from engine import (
    BUILTIN_KINDS,
    ConfigError,
    CourierSettings,
    DispatcherSettings,
    Engine,
    EngineSettings,
    LocalLimiter,
    RetryPolicy,
    SendResult,
    Store,
    SystemClock,
)
from testkit.envelope import check_envelope
from testkit.scripted import Script
from testkit.servers import Reply, Request, ScriptedServer

FAST = CourierSettings(poll_s=0.02, retry_s=(0.05, 0.05, 0.05), reap_s=0.5)


@pytest.fixture
async def engine(store: Store) -> AsyncIterator[Engine]:
    script = Script(SystemClock())  # type: ignore[arg-type]
    settings = EngineSettings(
        dispatch=DispatcherSettings(retry=RetryPolicy(base_s=0.02, cap_s=0.05)),
        max_attempts=2,
        events=FAST,
    )
    factories = {**BUILTIN_KINDS, "scripted": script.provider}
    built = Engine(store, LocalLimiter(SystemClock()), factories, settings=settings)
    built.script = script  # type: ignore[attr-defined]
    await built.open()
    await built.tenant_add("acme")
    await built.provider_add("p", "scripted")
    yield built
    await built.close()


@pytest.fixture
async def receiver() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer({"/hook": [Reply(204)]}) as server:
        yield server


def verified(secret: str, request: Request) -> dict[str, Any]:
    """The event's body, once the oracle has checked its signature."""
    Webhook(secret).verify(request.body, request.headers)
    body: dict[str, Any] = json.loads(request.body)
    return body


async def until(check: Callable[[], bool], within_s: float = 15.0) -> None:
    async with asyncio.timeout(within_s):
        while not check():
            await asyncio.sleep(0.02)


def types_of(server: ScriptedServer) -> list[str]:
    return [json.loads(r.body)["type"] for r in server.seen("/hook")]


async def test_each_event_type_arrives_signed(engine: Engine, receiver: ScriptedServer) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    assert made.secret.startswith("whsec_")
    script: Script = engine.script  # type: ignore[attr-defined]
    script.answers.extend(
        [SendResult.transient("busy"), SendResult.delivered(), SendResult.permanent("no such")]
    )
    await engine.start()
    ok = await engine.enqueue("acme", "p", "alice@example.com", key="k-ok")
    await until(lambda: types_of(receiver).count("notification.delivered") == 1)
    dead = await engine.enqueue("acme", "p", "bob@example.com", key="k-dead")
    later = await engine.enqueue(
        "acme", "p", "carol@example.com", send_at=engine.clock.wall() + 3600
    )
    await engine.notification_cancel("acme", later.id)
    gone = await engine.enqueue("acme", "p", "dan@example.com", ttl_s=0.001)
    await engine.suppression_add("acme", "p", ["erin@example.com"])
    suppressed = await engine.enqueue("acme", "p", "erin@example.com")
    want = {
        ok.id: ["notification.attempt_failed", "notification.delivered"],
        dead.id: ["notification.attempt_failed", "notification.dead"],
        later.id: ["notification.scheduled", "notification.cancelled"],
        gone.id: ["notification.expired"],
        suppressed.id: ["notification.suppressed"],
    }
    await until(lambda: len(receiver.seen("/hook")) >= sum(len(v) for v in want.values()))
    bodies = [verified(made.secret, r) for r in receiver.seen("/hook")]
    by_id: dict[int, list[dict[str, Any]]] = {}
    for body in bodies:
        by_id.setdefault(body["data"]["id"], []).append(body)
    for nid, types in want.items():
        got = sorted(by_id[nid], key=lambda b: b["data"]["sequence"])
        assert [b["type"] for b in got] == types, nid
    failed, delivered = sorted(by_id[ok.id], key=lambda b: b["data"]["sequence"])
    assert failed["data"] | {"error": "busy"} == failed["data"]
    assert (failed["data"]["attempt"], failed["data"]["max_attempts"]) == (1, 2)
    assert (failed["data"]["retrying"], failed["data"]["outcome"]) == (True, "transient")
    assert delivered["data"]["state"] == "delivered" and "error" not in delivered["data"]
    assert delivered["data"]["idempotency_key"] == "k-ok"
    assert delivered["data"]["recipient"] == "a***@e***.com"  # masked, never the address
    assert delivered["data"]["tenant"] == "acme" and delivered["data"]["provider"] == "p"
    final = max(by_id[dead.id], key=lambda b: b["data"]["sequence"])
    assert final["data"]["state"] == "dead"
    last_try = min(by_id[dead.id], key=lambda b: b["data"]["sequence"])
    assert last_try["data"]["retrying"] is False
    for request in receiver.seen("/hook"):
        assert b"alice@example.com" not in request.body and b"bob@" not in request.body
        assert len(request.body) <= 20_000


async def test_only_the_subscribed_types_of_the_tenants_own_notifications(
    engine: Engine, receiver: ScriptedServer
) -> None:
    await engine.tenant_add("other")
    made = await engine.webhook_add(
        "acme",
        receiver.url("/hook"),
        events=["dead", "notification.cancelled"],
        allow_private=True,
    )
    await engine.start()
    await engine.enqueue("other", "p", "x@example.com", send_at=engine.clock.wall() + 60)
    await engine.enqueue("acme", "p", "y@example.com")
    later = await engine.enqueue("acme", "p", "z@example.com", send_at=engine.clock.wall() + 60)
    await engine.notification_cancel("acme", later.id)
    await until(lambda: len(receiver.seen("/hook")) >= 1)
    await engine.run_until_empty(timeout_s=10)
    await asyncio.sleep(0.3)
    assert types_of(receiver) == ["notification.cancelled"]
    assert verified(made.secret, receiver.seen("/hook")[0])["data"]["id"] == later.id


async def test_a_failed_post_is_retried_with_the_same_id_and_a_fresh_signature(
    engine: Engine,
) -> None:
    async with ScriptedServer({"/hook": [Reply(500), Reply(200)]}) as server:
        made = await engine.webhook_add("acme", server.url("/hook"), allow_private=True)
        await engine.start()
        later = await engine.enqueue("acme", "p", "a@example.com", send_at=engine.clock.wall() + 60)
        await until(lambda: len(server.seen("/hook")) == 2)
        first, second = server.seen("/hook")
        assert first.headers["webhook-id"] == second.headers["webhook-id"]
        assert verified(made.secret, second)["data"]["id"] == later.id
        verified(made.secret, first)
        await until(lambda: engine.courier is not None and engine.courier.delivered == 1)
        rows = await engine.webhook_events("acme")
        assert [(r.state, r.tries, r.last_status) for r in rows] == [("delivered", 2, 200)]


async def test_retry_after_is_honoured(engine: Engine) -> None:
    async with ScriptedServer({"/hook": [Reply(429, {"Retry-After": "1"}), Reply(200)]}) as server:
        await engine.webhook_add("acme", server.url("/hook"), allow_private=True)
        await engine.start()
        await engine.enqueue("acme", "p", "a@example.com", send_at=engine.clock.wall() + 60)
        await until(lambda: len(server.seen("/hook")) == 2)
        first, second = server.seen("/hook")
        assert second.at - first.at >= 0.95  # not the 0.05 s of the retry schedule


async def test_a_410_disables_the_endpoint_and_holds_its_events(engine: Engine) -> None:
    async with ScriptedServer({"/hook": [Reply(410), Reply(200)]}) as server:
        made = await engine.webhook_add("acme", server.url("/hook"), allow_private=True)
        await engine.start()
        await engine.enqueue("acme", "p", "a@example.com", send_at=engine.clock.wall() + 60)
        await until(lambda: bool(engine.courier and engine.courier.disabled))
        [view] = await engine.webhooks("acme")
        assert view.endpoint.disabled_at is not None
        assert view.endpoint.disabled_reason == "it answered 410 Gone"
        assert view.health.held == 1
        # New changes write no event while it is disabled; enabled again, the held one goes.
        await engine.enqueue("acme", "p", "b@example.com", send_at=engine.clock.wall() + 60)
        assert await engine.webhook_enable("acme", made.endpoint.id)
        await until(lambda: len(server.seen("/hook")) == 2)
        await asyncio.sleep(0.2)
        assert len(server.seen("/hook")) == 2
        entries = [e.action for e in await engine.audit_entries()]
        assert {"webhook.add", "webhook.disable", "webhook.enable"} <= set(entries)


async def test_a_rotation_signs_with_both_secrets_for_the_grace_period(
    engine: Engine, receiver: ScriptedServer
) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    rotated = await engine.webhook_secret_rotate("acme", made.endpoint.id, grace_s=3600)
    assert rotated.secret != made.secret
    await engine.start()
    await engine.enqueue("acme", "p", "a@example.com", send_at=engine.clock.wall() + 60)
    await until(lambda: len(receiver.seen("/hook")) == 1)
    request = receiver.seen("/hook")[0]
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    verified(made.secret, request)
    verified(rotated.secret, request)
    dropped = await engine.webhook_secret_rotate("acme", made.endpoint.id, grace_s=0)
    await engine.enqueue("acme", "p", "b@example.com", send_at=engine.clock.wall() + 60)
    await until(lambda: len(receiver.seen("/hook")) == 2)
    second = receiver.seen("/hook")[1]
    assert len(second.headers["webhook-signature"].split(" ")) == 1
    verified(dropped.secret, second)
    with pytest.raises(WebhookVerificationError):
        verified(rotated.secret, second)


async def test_replay_sends_a_tenants_events_again(
    engine: Engine, receiver: ScriptedServer
) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    await engine.start()
    since = engine.clock.wall()
    for n in range(3):
        await engine.enqueue("acme", "p", f"a{n}@example.com", send_at=since + 60)
    await until(lambda: len(receiver.seen("/hook")) == 3)
    await until(lambda: engine.courier is not None and engine.courier.delivered == 3)
    assert await engine.webhook_events_replay("acme", since=since) == 3
    await until(lambda: len(receiver.seen("/hook")) == 6)
    ids = [r.headers["webhook-id"] for r in receiver.seen("/hook")]
    assert sorted(ids[:3]) == sorted(ids[3:])
    for request in receiver.seen("/hook"):
        verified(made.secret, request)


async def test_the_test_event_is_signed_and_answered(
    engine: Engine, receiver: ScriptedServer
) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    answer = await engine.webhook_test("acme", made.endpoint.id)
    assert (answer.status, answer.ok) == (204, True)
    body = verified(made.secret, receiver.seen("/hook")[0])
    assert body["type"] == "webhook.test"


async def test_private_addresses_are_refused_unless_allowed(
    engine: Engine, receiver: ScriptedServer
) -> None:
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "https://169.254.169.254/",
        "https://10.0.0.8/hook",
        "https://127.0.0.1/hook",
        "https://[::1]/hook",
        "https://localhost/hook",
        "http://example.com/hook",  # plain http only with --allow-private
        "https://user:pw@example.com/hook",
        "ftp://example.com/",
    ):
        with pytest.raises(ConfigError):
            await engine.webhook_add("acme", url)
    assert await engine.webhooks("acme") == []


async def test_an_address_found_by_dns_is_checked_before_connecting(store: Store) -> None:
    from engine.providers.endpoint_post import EndpointPoster

    async def metadata(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    poster = EndpointPoster(resolve=metadata)
    answer = await poster.post("https://hooks.example.com/x", b"{}", {}, allow_private=False)
    assert answer.refused and answer.status is None
    assert "169.254.169.254 is a link-local address" in answer.error
    await poster.aclose()


async def test_removing_an_endpoint_takes_its_events(
    engine: Engine, receiver: ScriptedServer
) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    await engine.enqueue("acme", "p", "a@example.com", send_at=engine.clock.wall() + 60)
    [view] = await engine.webhooks("acme")
    assert view.health.pending == 1
    await engine.webhook_remove("acme", made.endpoint.id)
    assert await engine.webhooks("acme") == []
    assert await engine.webhook_events("acme") == []


async def test_retention_prunes_the_events_sent_or_given_up_and_keeps_the_rest(
    engine: Engine, store: Store, receiver: ScriptedServer
) -> None:
    await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    await engine.start()
    for n in range(3):
        await engine.enqueue("acme", "p", f"a{n}@example.com", send_at=engine.clock.wall() + 60)
    await until(lambda: engine.courier is not None and engine.courier.delivered == 3)
    await engine.stop()
    await engine.enqueue("acme", "p", "later@example.com", send_at=engine.clock.wall() + 60)
    retention = await store.maintenance.retention()
    report = await store.maintenance.prune(retention, now=engine.clock.wall() + 400 * 86400)
    assert report.status_events == 3
    [left] = await engine.webhook_events("acme")
    assert left.state == "pending"  # not sent yet: never pruned


async def test_key_rotation_re_encrypts_the_signing_secrets(
    engine: Engine, store: Store, receiver: ScriptedServer
) -> None:
    made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
    await engine.webhook_secret_rotate("acme", made.endpoint.id)
    checked = await engine.keys_rotate(dry_run=True)
    by_table = {t.table: t.checked for t in checked.tables}
    assert by_table["event_endpoints"] == 1
    assert by_table["event_endpoints (old secrets)"] == 1


async def test_an_endpoint_gets_its_events_within_its_own_envelope(
    engine: Engine, receiver: ScriptedServer
) -> None:
    """Its bucket, not the tenant's or a provider's: 30 events to an endpoint at 10/s, burst 3,
    arrive at the receiver within ``burst + rate * (W + 0.02) + 1`` in every window, and close
    to it (they were all due at once)."""
    await engine.webhook_add(
        "acme", receiver.url("/hook"), allow_private=True, rate_per_s=10, burst=3
    )
    await engine.start()
    later = engine.clock.wall() + 3600
    for n in range(30):
        await engine.enqueue("acme", "p", f"u{n}@example.com", send_at=later)
    await until(lambda: len(receiver.seen("/hook")) == 30, within_s=20)
    arrived = [r.at for r in receiver.seen("/hook")]
    most = check_envelope(arrived, 10, 3, (0.5, 1.0, 2.0), lag_s=0.02)
    assert most[2.0] >= 20  # paced, not trickled: 3 + 10 * 2 allowed
