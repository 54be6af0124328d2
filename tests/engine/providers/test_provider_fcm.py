"""The ``fcm`` kind against loopback servers that speak Google's OAuth 2.0 token endpoint (the
JWT's RS256 signature checked with the service account's public key) and FCM's HTTP v1 send:
each documented answer maps onto an outcome, the access token is reused, refreshed when it
expires and after a 401, and the device token and credentials never show."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
from engine.providers.fcm import FcmProvider
from testkit.google import (
    ACCOUNT,
    DEVICE,
    EMAIL,
    SEND,
    Google,
    error,
    fcm_send,
)
from testkit.servers import Reply, Request, ScriptedServer, fast_engine


def _provider(server: ScriptedServer, clock: FakeClock | None = None) -> FcmProvider:
    config = ProviderConfig(
        "push",
        "fcm",
        {
            "project_id": "demo-project",
            "base_url": server.url(""),
            "token_url": server.url("/token"),
        },
        {"service_account": ACCOUNT},
    )
    built = BUILTIN_KINDS["fcm"](config)
    assert isinstance(built, FcmProvider)
    if clock is not None:
        built._clock = clock
    return built


def _message(payload: dict[str, Any] | None = None) -> Message:
    return Message(1, "acme", "push", DEVICE, payload or {"title": "Hi", "body": "there"}, "k", 1)


async def test_sends_with_a_token_it_reuses_and_refreshes_when_it_expires() -> None:
    google = Google(lifetime_s=120)
    clock = FakeClock()
    async with ScriptedServer({"/token": [google.token], SEND: [fcm_send(google)]}) as server:
        google.audience = server.url("/token")
        provider = _provider(server, clock)
        try:
            first = await provider.send(_message())
            second = await provider.send(_message({"data": {"order": "42"}}))
            clock.advance(61)  # within a minute of its end: fetched again
            third = await provider.send(_message())
        finally:
            await provider.aclose()
    assert [r.outcome for r in (first, second, third)] == [Outcome.DELIVERED] * 3
    assert "0:1234" in first.detail
    assert len(google.issued) == 2
    sent = [r.json()["message"] for r in server.seen(SEND)]
    assert sent[0] == {"token": DEVICE, "notification": {"title": "Hi", "body": "there"}}
    assert sent[1] == {"token": DEVICE, "data": {"order": "42"}}


async def test_a_deadline_reaches_android_and_apple_devices_and_none_without() -> None:
    google = Google()
    async with ScriptedServer({"/token": [google.token], SEND: [fcm_send(google)]}) as server:
        google.audience = server.url("/token")
        provider = _provider(server)
        try:
            with_deadline = _message()
            with_deadline.expires_at, with_deadline.ttl_s = 1_800_000_000.5, 42.9
            assert (await provider.send(with_deadline)).outcome is Outcome.DELIVERED
            assert (await provider.send(_message())).outcome is Outcome.DELIVERED
        finally:
            await provider.aclose()
    first, second = (r.json()["message"] for r in server.seen(SEND))
    assert first["android"] == {"ttl": "42s"}
    assert first["apns"] == {"headers": {"apns-expiration": "1800000000"}}
    assert "android" not in second and "apns" not in second


async def test_a_401_fetches_a_new_token_and_sends_once_more() -> None:
    google = Google()
    rejected = {"n": 0}
    ok = fcm_send(google)

    def send(request: Request) -> Reply:
        rejected["n"] += 1
        if rejected["n"] == 1:  # the first token was revoked
            return error(401, "UNAUTHENTICATED", None, "token revoked")
        return ok(request)

    async with ScriptedServer({"/token": [google.token], SEND: [send]}) as server:
        google.audience = server.url("/token")
        provider = _provider(server)
        try:
            result = await provider.send(_message())
        finally:
            await provider.aclose()
    assert result.outcome is Outcome.DELIVERED and len(google.issued) == 2


@pytest.mark.parametrize(
    ("reply", "outcome", "fault"),
    [
        (error(404, "NOT_FOUND", "UNREGISTERED", f"{DEVICE} is gone"), Outcome.PERMANENT, False),
        (
            error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "bad token"),
            Outcome.PERMANENT,
            False,
        ),
        (
            error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "slow down", **{"Retry-After": "9"}),
            Outcome.THROTTLED,
            False,
        ),
        (error(503, "UNAVAILABLE", "UNAVAILABLE", "try later"), Outcome.TRANSIENT, True),
        (error(500, "INTERNAL", "INTERNAL", "oops"), Outcome.TRANSIENT, True),
        (
            error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "wrong sender"),
            Outcome.UNAVAILABLE,
            True,
        ),
    ],
)
async def test_each_answer_maps_onto_an_outcome(
    reply: Reply, outcome: Outcome, fault: bool
) -> None:
    google = Google()
    async with ScriptedServer(
        {"/token": [google.token], SEND: [fcm_send(google, reply)]}
    ) as server:
        google.audience = server.url("/token")
        provider = _provider(server)
        try:
            result = await provider.send(_message())
        finally:
            await provider.aclose()
    assert result.outcome is outcome, result
    assert result.is_provider_fault is fault
    assert result.recipient_gone is (b"UNREGISTERED" in reply.body)  # suppressed from now on
    assert DEVICE not in result.detail and "ya29" not in result.detail
    if outcome is Outcome.THROTTLED:
        assert result.retry_after_s == 9.0


async def test_a_token_endpoint_that_refuses_makes_the_provider_unavailable() -> None:
    async with ScriptedServer(
        {"/token": [Reply(400, {}, b'{"error": "invalid_grant"}')]}
    ) as server:
        provider = _provider(server)
        try:
            result = await provider.send(_message())
            bad = await provider.send(_message({"data": {"n": 1}}))
        finally:
            await provider.aclose()
    assert result.outcome is Outcome.UNAVAILABLE and "invalid_grant" in result.detail
    assert bad.outcome is Outcome.PERMANENT and "strings" in bad.detail


@pytest.mark.parametrize(
    ("account", "words"),
    [
        ("not json", "not a service account"),
        (json.dumps({"client_email": EMAIL}), "lacks client_email or private_key"),
        (json.dumps({"client_email": EMAIL, "private_key": "-----BEGIN nope"}), "cannot be read"),
    ],
)
def test_a_bad_service_account_is_one_sentence(account: str, words: str) -> None:
    config = ProviderConfig("push", "fcm", {"project_id": "p"}, {"service_account": account})
    with pytest.raises(ConfigError) as refused:
        BUILTIN_KINDS["fcm"](config)
    assert words in refused.value.message and "BEGIN" not in refused.value.message


def test_the_key_never_shows() -> None:
    config = ProviderConfig("push", "fcm", {"project_id": "p"}, {"service_account": ACCOUNT})
    provider = BUILTIN_KINDS["fcm"](config)
    assert "PRIVATE" not in repr(provider) and EMAIL not in repr(provider)


async def test_pushes_go_through_an_engine(store: Store) -> None:
    """Through a dispatching engine on each store: delivered, and an unregistered device dead."""
    google = Google()
    ok = fcm_send(google)

    def send(request: Request) -> Reply:
        if request.json()["message"]["token"] == "gone-device":
            return error(404, "NOT_FOUND", "UNREGISTERED", "gone")
        return ok(request)

    async with (
        ScriptedServer({"/token": [google.token], SEND: [send]}) as server,
        fast_engine(store, concurrency=4, max_attempts=3) as engine,
    ):
        google.audience = server.url("/token")
        await engine.tenant_add("acme")
        options = {
            "project_id": "demo-project",
            "base_url": server.url(""),
            "token_url": server.url("/token"),
        }
        await engine.provider_add(
            "push", "fcm", options=options, secrets={"service_account": ACCOUNT}
        )
        for n in range(4):
            await engine.enqueue("acme", "push", DEVICE, {"title": f"hi {n}"})
        gone = await engine.enqueue("acme", "push", "gone-device", {"title": "bye"})
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30)
        delivered = await engine.notifications("acme", state=NotificationState.DELIVERED)
        dead = await engine.dead("acme")
    assert len(delivered) == 4
    assert [view.id for _, view in dead] == [gone.id]
    assert "UNREGISTERED" in (dead[0][1].last_error or "") and "gone-device" not in (
        dead[0][1].last_error or ""
    )
    assert len(google.issued) == 1  # one token for every send
