"""The ``twilio`` kind against a loopback server that speaks Twilio's Messaging API (HTTP/1.1,
form-encoded, Basic auth checked): every answer Twilio documents maps onto an outcome, the
options are checked, secrets never show, and notifications go through an engine end to end."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from engine import (
    BUILTIN_KINDS,
    ConfigError,
    Message,
    NotificationState,
    Outcome,
    ProviderConfig,
    Store,
)
from testkit.servers import Reply, Request, ScriptedServer, fast_engine
from testkit.twilio import (
    ACCOUNT,
    PATH,
    TOKEN,
    error,
    twilio,
)


def _config(server: ScriptedServer, **options: str) -> ProviderConfig:
    opts = {"account_sid": ACCOUNT, "from": "+15550001111", "base_url": server.url(""), **options}
    return ProviderConfig("sms", "twilio", opts, {"auth_token": TOKEN})


def _message(recipient: str = "+15551234567", text: str = "hello") -> Message:
    return Message(1, "acme", "sms", recipient, {"body": text}, "key-1", 1)


async def test_a_sent_message_reaches_twilio_as_documented() -> None:
    async with ScriptedServer({PATH: [twilio]}) as server:
        provider = BUILTIN_KINDS["twilio"](_config(server))
        try:
            result = await provider.send(_message())
        finally:
            await provider.aclose()
    assert result.outcome is Outcome.DELIVERED and "SM" in result.detail
    [request] = server.seen(PATH)
    form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
    assert form == {"To": "+15551234567", "Body": "hello", "From": "+15550001111"}


async def test_a_deadline_is_sent_as_the_validity_period_within_twilios_bounds() -> None:
    async with ScriptedServer({PATH: [twilio]}) as server:
        provider = BUILTIN_KINDS["twilio"](_config(server))
        try:
            for ttl_s in (90.7, 0.2, 86_400.0):
                sent = _message()
                sent.expires_at, sent.ttl_s = 1_800_000_000.0, ttl_s
                assert (await provider.send(sent)).outcome is Outcome.DELIVERED
        finally:
            await provider.aclose()
    periods = [parse_qs(r.body.decode())["ValidityPeriod"] for r in server.seen(PATH)]
    assert periods == [["90"], ["1"], ["36000"]]


@pytest.mark.parametrize(
    ("reply", "outcome", "fault"),
    [
        (error(429, 20429, "Too Many Requests", **{"Retry-After": "7"}), Outcome.THROTTLED, False),
        (error(400, 20429, "Too Many Requests"), Outcome.THROTTLED, False),
        (
            error(400, 21211, "The 'To' number +1555 is not a valid phone number."),
            Outcome.PERMANENT,
            False,
        ),
        (error(400, 21614, "not a mobile number"), Outcome.PERMANENT, False),
        (error(400, 21610, "Attempt to send to unsubscribed recipient"), Outcome.PERMANENT, False),
        (error(400, 30036, "Validity Period Expired"), Outcome.EXPIRED, False),
        (error(401, 20003, "Authenticate"), Outcome.UNAVAILABLE, True),
        (error(503, 20500, "Internal Server Error"), Outcome.TRANSIENT, True),
        (error(400, 21602, "Message body is required."), Outcome.PERMANENT, False),
        (Reply(502, {}, b"<html>bad gateway</html>"), Outcome.TRANSIENT, True),
    ],
)
async def test_each_answer_maps_onto_an_outcome(
    reply: Reply, outcome: Outcome, fault: bool
) -> None:
    async with ScriptedServer({PATH: [reply]}) as server:
        provider = BUILTIN_KINDS["twilio"](_config(server))
        try:
            result = await provider.send(_message("+15551230000"))
        finally:
            await provider.aclose()
    assert result.outcome is outcome, result
    assert result.is_provider_fault is fault
    assert result.recipient_gone is (b"21610" in reply.body)  # replied STOP: suppressed
    assert "+15551230000" not in result.detail and TOKEN not in result.detail
    if reply.headers.get("Retry-After") == "7":
        assert result.retry_after_s == 7.0


async def test_no_answer_and_no_body() -> None:
    provider = BUILTIN_KINDS["twilio"](
        ProviderConfig(
            "sms",
            "twilio",
            {"account_sid": ACCOUNT, "from": "+15550001111", "base_url": "http://127.0.0.1:9"},
            {"auth_token": TOKEN},
        )
    )
    try:
        assert (await provider.send(_message())).outcome is Outcome.UNAVAILABLE
        empty = await provider.send(Message(1, "acme", "sms", "+1555", {"text": "x"}, "k", 1))
        assert empty.outcome is Outcome.PERMANENT and "body" in empty.detail
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    ("options", "secrets", "words"),
    [
        ({"account_sid": "nope", "from": "+1"}, {"auth_token": TOKEN}, "account_sid"),
        ({"account_sid": ACCOUNT}, {"auth_token": TOKEN}, "either from or messaging_service_sid"),
        (
            {"account_sid": ACCOUNT, "from": "+1", "messaging_service_sid": "MG" + "0" * 32},
            {"auth_token": TOKEN},
            "not both",
        ),
        ({"account_sid": ACCOUNT, "messaging_service_sid": "XX"}, {"auth_token": TOKEN}, "MG"),
        ({"account_sid": ACCOUNT, "from": "+1"}, {}, "auth_token"),
        (
            {"account_sid": ACCOUNT, "from": "+1", "base_url": "ftp://x"},
            {"auth_token": TOKEN},
            "base_url",
        ),
    ],
)
def test_bad_options_are_one_sentence(
    options: dict[str, str], secrets: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        BUILTIN_KINDS["twilio"](ProviderConfig("sms", "twilio", options, secrets))
    assert words in refused.value.message and TOKEN not in refused.value.message


async def test_messages_go_through_an_engine(store: Store) -> None:
    calls = {"n": 0}

    def flaky(request: Request) -> Reply:
        calls["n"] += 1
        if calls["n"] == 2:
            return error(429, 20429, "Too Many Requests", **{"Retry-After": "0"})
        return twilio(request)

    async with (
        ScriptedServer({PATH: [flaky]}) as server,
        fast_engine(store, concurrency=4, max_attempts=3) as engine,
    ):
        await engine.tenant_add("acme")
        config = _config(server)
        await engine.provider_add(
            "sms", "twilio", options=dict(config.options), secrets=dict(config.secrets)
        )
        for n in range(5):
            await engine.enqueue("acme", "sms", f"+1555000000{n}", {"body": f"hi {n}"})
        bad = await engine.enqueue("acme", "sms", "5550000", {"body": "no plus"})
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30)
        delivered = await engine.notifications("acme", state=NotificationState.DELIVERED)
        dead = await engine.dead("acme")
    assert len(delivered) == 5
    assert [view.id for _, view in dead] == [bad.id]
    assert "21211" in (dead[0][1].last_error or "")
    assert len(server.seen(PATH)) == 7  # five delivered, one throttled and sent again, one refused
