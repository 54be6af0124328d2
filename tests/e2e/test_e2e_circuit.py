"""End to end, on the real clock: the SMTP and webhook providers against real servers on
127.0.0.1 that are down (the port closed, or no STARTTLS), then come up. The circuit opens,
nothing is dead and no attempt is spent; once the server is back a probe closes the circuit and
every notification is delivered exactly once. On SQLite and on Postgres (``store``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Self

from engine import CircuitState, Engine, NotificationState, NotificationView, Store
from engine.providers.smtp import message_id
from testkit.redis_server import free_port
from testkit.servers import MailServer, Reply, ScriptedServer, fast_engine
from testkit.support import eventually

DOMAIN = "omnipost.test"
COUNT = 6
# Probes come quickly here: 0.2 s, then 0.4 s at most.
FAST_CIRCUIT = {"circuit_backoff_s": "0.2", "circuit_backoff_max_s": "0.4"}


class MailServerAt(MailServer):
    """A ``MailServer`` on a port chosen beforehand (the provider points at it while down)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.wanted = port

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, "127.0.0.1", self.wanted)
        self.port = self.wanted
        return self


class WebServerAt(ScriptedServer):
    def __init__(self, port: int) -> None:
        super().__init__({"/hook": [Reply(200)]})
        self.wanted = port

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.wanted)
        self.port = self.wanted
        return self


async def enqueue(engine: Engine, provider: str) -> list[str]:
    await engine.tenant_add("acme")
    keys = [f"order.{n}" for n in range(COUNT)]
    for n, key in enumerate(keys):
        payload = {"subject": f"Order {n}", "text": "hi\n"}
        await engine.enqueue("acme", provider, f"user{n}@acme.example", payload, key=key)
    return keys


async def circuit(engine: Engine, provider: str) -> CircuitState:
    return (await engine.circuit_states())[provider].state


async def views(engine: Engine) -> list[NotificationView]:
    return await engine.notifications("acme", limit=1000)


async def held_while_down(engine: Engine, provider: str) -> None:
    """The circuit opens; every notification stays queued with no attempt spent."""
    await engine.start()

    async def opened() -> bool:
        return await circuit(engine, provider) is not CircuitState.CLOSED

    await eventually(opened, timeout_s=20)
    await asyncio.sleep(1.0)  # a few probes fail meanwhile
    rows = await views(engine)
    assert len(rows) == COUNT
    assert {r.state for r in rows} <= {NotificationState.QUEUED, NotificationState.LEASED}
    assert {r.failures for r in rows} == {0}
    assert await engine.dead() == []
    health = (await engine.circuit_states())[provider]
    assert health.failures >= 3
    assert "user" not in health.last_error  # never a recipient


async def all_delivered_unspent(engine: Engine, provider: str) -> None:
    assert await engine.run_until_empty(timeout_s=30, poll_s=0.05)
    rows = await views(engine)
    assert {(r.state, r.failures) for r in rows} == {(NotificationState.DELIVERED, 0)}
    assert await circuit(engine, provider) is CircuitState.CLOSED


async def test_smtp_without_starttls_keeps_the_notifications_queued(store: Store) -> None:
    """The motivating case: the default ``security`` (starttls) against a server that offers
    none used to spend every attempt and kill all three notifications within seconds."""
    async with (
        MailServer() as mail,
        fast_engine(store, concurrency=4, max_attempts=5) as engine,
    ):
        options = {"host": "127.0.0.1", "port": str(mail.port), "from": f"me@{DOMAIN}"}
        await engine.provider_add("mail", "smtp", options=options)
        await enqueue(engine, "mail")
        await held_while_down(engine, "mail")
        health = (await engine.circuit_states())["mail"]
        assert "STARTTLS extension not supported" in health.last_error
        assert mail.mailbox.received == []


async def test_smtp_server_down_then_up_delivers_each_once(store: Store) -> None:
    port = free_port()
    async with fast_engine(store, concurrency=4, max_attempts=2) as engine:
        options = {
            "host": "127.0.0.1",
            "port": str(port),
            "security": "none",
            "from": f"OmniPost <noreply@{DOMAIN}>",
            "timeout_s": "5",
            **FAST_CIRCUIT,
        }
        await engine.provider_add("mail", "smtp", options=options)
        keys = await enqueue(engine, "mail")
        await held_while_down(engine, "mail")
        async with MailServerAt(port) as mail:
            await all_delivered_unspent(engine, "mail")
    received = Counter(str(m["Message-ID"]) for m in mail.mailbox.received)
    assert received == Counter({message_id("acme", key, DOMAIN): 1 for key in keys})


async def test_webhook_down_then_up_delivers_each_once(store: Store) -> None:
    port = free_port()
    async with fast_engine(store, concurrency=4, max_attempts=2) as engine:
        options = {"url": f"http://127.0.0.1:{port}/hook", "timeout_s": "2", **FAST_CIRCUIT}
        await engine.provider_add("hook", "webhook", options=options)
        keys = await enqueue(engine, "hook")
        await held_while_down(engine, "hook")
        async with WebServerAt(port) as web:
            await all_delivered_unspent(engine, "hook")
    assert Counter(r.headers["idempotency-key"] for r in web.seen("/hook")) == Counter(
        dict.fromkeys(keys, 1)
    )


async def test_webhook_5xx_run_opens_it_and_recovery_closes_it(store: Store) -> None:
    """A run of 503s: the attempts of the sends tried before it opened are spent (the request
    reached the endpoint), none after; nothing is dead with max_attempts above that."""
    served = 0

    def flaky(_: object) -> Reply:
        nonlocal served
        served += 1
        return Reply(503, body=b"maintenance") if served <= 5 else Reply(200)

    async with (
        ScriptedServer({"/hook": [flaky]}) as web,
        fast_engine(store, concurrency=1, max_attempts=5) as engine,
    ):
        options = {"url": web.url("/hook"), **FAST_CIRCUIT}
        await engine.provider_add("hook", "webhook", options=options)
        await enqueue(engine, "hook")
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30, poll_s=0.05)
        rows = await views(engine)
        assert {r.state for r in rows} == {NotificationState.DELIVERED}
        assert sum(r.failures for r in rows) <= 2  # the two before the third opened it
        assert await circuit(engine, "hook") is CircuitState.CLOSED
