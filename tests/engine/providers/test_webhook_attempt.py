"""The webhook body's ``attempt`` is the delivery attempt as the retry policy counts it.

A real engine POSTs to a real HTTP server on 127.0.0.1 (testkit/servers.py). Throttled sends
spend no attempt, so they do not count; each transient failure does, and the number never goes
above ``max_attempts``. Runs on SQLite and on Postgres (the ``store`` fixture).
"""

from __future__ import annotations

import json

from engine import Message, NotificationState, Store
from engine.providers import WebhookProvider
from testkit.servers import Reply, Script, ScriptedServer, fast_engine

MAX_ATTEMPTS = 3
THROTTLED = Reply(429, {"Retry-After": "0"})
FAILED = Reply(503, body=b"try later")
OK = Reply(200)

PLANS: dict[str, Script] = {
    "/throttled": [THROTTLED, THROTTLED, OK],
    "/failing": [FAILED, FAILED, OK],
    "/dead": [FAILED],  # the last entry repeats: fails every time
}


async def test_the_attempt_counts_deliveries_not_claims(store: Store) -> None:
    async with (
        ScriptedServer(dict(PLANS)) as server,
        fast_engine(store, concurrency=4, max_attempts=MAX_ATTEMPTS) as engine,
    ):
        await engine.tenant_add("acme")
        for path in PLANS:
            name = path.strip("/")
            # No circuit opens here: this is about one notification's attempts.
            options = {"url": server.url(path), "circuit_failures": "1000"}
            await engine.provider_add(name, "webhook", options=options)
            await engine.enqueue("acme", name, f"{name}@example.com", key=name)
        await engine.start()
        assert await engine.run_until_empty(timeout_s=20, poll_s=0.05)
        states = {v.idempotency_key: v.state for v in await engine.notifications("acme")}

    attempts = {path: [r.json()["attempt"] for r in server.seen(path)] for path in PLANS}
    assert attempts == {
        "/throttled": [1, 1, 1],  # throttled twice, then delivered at its first attempt
        "/failing": [1, 2, 3],  # failed twice, then delivered at its third
        "/dead": [1, 2, 3],  # never above max_attempts
    }
    assert states == {
        "throttled": NotificationState.DELIVERED,
        "failing": NotificationState.DELIVERED,
        "dead": NotificationState.DEAD,
    }


def test_the_body_carries_the_delivery_attempt_not_the_claim() -> None:
    sent = Message(7, "acme", "hook", "bob@example.com", {}, "k7", attempt=5, delivery_attempt=2)
    assert json.loads(WebhookProvider.encode(sent))["attempt"] == 2
