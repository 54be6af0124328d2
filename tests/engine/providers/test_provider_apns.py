"""The ``apns`` kind against a loopback APNs: HTTP/2 over TLS (ALPN ``h2``, hypercorn) with a
certificate the test makes and the provider trusts through ``ca_file``, the ES256 JWT checked
with the key's public half. Every documented answer maps onto an outcome; the JWT is reused,
and made again after 50 minutes and after a 403; the device token and the key never show."""

from __future__ import annotations

import uuid
from pathlib import Path
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
from engine.providers.apns import ApnsProvider
from testkit.apple import (
    DEVICE,
    KEY_ID,
    PEM,
    TEAM,
    TOPIC,
    Answer,
    Apple,
    certificate,
    serving,
)
from testkit.servers import fast_engine


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


async def test_a_deadline_is_the_apns_expiration(tmp_path: Path) -> None:
    apple = Apple()
    async with serving(apple, tmp_path) as (url, ca):
        provider = _provider(url, ca)
        try:
            sent = _message()
            sent.expires_at, sent.ttl_s = 1_800_000_000.7, 60.0
            assert (await provider.send(sent)).outcome is Outcome.DELIVERED
        finally:
            await provider.aclose()
    [one] = apple.seen
    assert one["headers"]["apns-expiration"] == "1800000000"


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
    other, _ = certificate(folder)  # a certificate the server does not use
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


@pytest.mark.slow
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
        await engine.tenant_add("acme")
        options = {
            "team_id": TEAM,
            "key_id": KEY_ID,
            "topic": TOPIC,
            "base_url": url,
            "ca_file": str(ca),
        }
        await engine.provider_add("ios", "apns", options=options, secrets={"signing_key": PEM})
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
