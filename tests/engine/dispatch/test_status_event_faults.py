"""Status events through faults (issue 48), on virtual time: an endpoint down for ten minutes
gets every event once it is up, on the retry schedule (5 s, 5 min, 30 min...), each signed as
the ``standardwebhooks`` oracle checks; a courier's lease a dead worker left comes back.

The clock's wall time is set so that the deliveries that succeed carry a timestamp near the real
one (the oracle refuses one more than five minutes off)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping

import pytest
from standardwebhooks.webhooks import Webhook

from engine import CourierSettings, EngineSettings, FakeClock, Store
from engine.providers.endpoint_post import EndpointPoster, PostAnswer
from testkit.scripted import Script
from testkit.servers import Reply, Request, ScriptedServer
from testkit.virtual_time import VirtualEngines, until

DOWN_S = 600.0
UP_AT_S = 2105.0  # the third retry: 5 s, 300 s, then 1,800 s after the one before


@pytest.fixture
def clock() -> FakeClock:
    start = 1_000.0
    return FakeClock(start, wall_offset=time.time() - start - UP_AT_S, autojump=True)


@pytest.fixture
async def engines(store: Store, clock: FakeClock, script: Script) -> AsyncIterator[VirtualEngines]:
    opened = VirtualEngines(store, clock, {"scripted": script.provider})
    yield opened
    await opened.close()


def _busy_post(clock: FakeClock, poster: EndpointPoster):  # type: ignore[no-untyped-def]
    async def post(
        url: str, body: bytes, headers: Mapping[str, str], allow_private: bool
    ) -> PostAnswer:
        with clock.busy():  # a real socket: virtual time waits for it
            return await poster.post(url, body, headers, allow_private=allow_private)

    return post


@pytest.mark.slow
async def test_an_endpoint_down_for_ten_minutes_gets_every_event_once_up(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    began = clock.monotonic()

    def answer(request: Request) -> Reply:
        return Reply(503) if clock.monotonic() - began < DOWN_S else Reply(204)

    poster = EndpointPoster()
    async with ScriptedServer({"/hook": [answer]}) as receiver:
        engine = await engines.open(EngineSettings(events=CourierSettings()))
        engine.event_post = _busy_post(clock, poster)
        await engine.tenant_add("acme")
        await engine.provider_add("p", "scripted")
        made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
        await engine.start()
        ids = [(await engine.enqueue("acme", "p", f"u{n}@example.com")).id for n in range(20)]
        await engines.until_empty(engine)

        def delivered() -> set[int]:
            ok = [a.request for a in receiver.answers if a.reply.status == 204]
            return {json.loads(r.body)["data"]["id"] for r in ok}

        await until(clock, lambda: delivered() == set(ids), within_s=4000, step_s=5.0)
        await poster.aclose()
    assert UP_AT_S <= clock.monotonic() - began <= UP_AT_S + 60
    tries: dict[str, list[float]] = {}
    for a in receiver.answers:
        tries.setdefault(a.request.headers["webhook-id"], []).append(a.request.at)
    assert len(tries) == 20
    for answered in (a for a in receiver.answers if a.reply.status == 204):
        Webhook(made.secret).verify(answered.request.body, answered.request.headers)
    # Every event was tried on the schedule: at once, then 5 s, 5 min and 30 min later.
    assert all(len(at) == 4 for at in tries.values()), {k: len(v) for k, v in tries.items()}
    rows = await engine.webhook_events("acme", limit=100)
    assert {(r.state, r.tries, r.last_status) for r in rows} == {("delivered", 4, 204)}
    [view] = await engine.webhooks("acme")
    assert view.endpoint.failing_since is None and view.endpoint.disabled_at is None


async def test_a_dead_couriers_leases_come_back(
    engines: VirtualEngines, clock: FakeClock, store: Store
) -> None:
    engine = await engines.open()
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")
    await engine.webhook_add("acme", "http://127.0.0.1:9/hook", allow_private=True)
    await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() + 60)
    [taken] = await store.status_events.claim("dead-worker", now=clock.wall(), lease_s=30, limit=5)
    assert await store.status_events.reap(clock.wall()) == 0  # its lease holds
    assert await store.status_events.reap(clock.wall() + 31) == 1
    [again] = await store.status_events.claim("next", now=clock.wall() + 31, lease_s=30, limit=5)
    assert (again.id, again.tries) == (taken.id, 2)


@pytest.mark.slow
async def test_an_endpoint_failing_every_try_for_its_time_is_disabled(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    """Failing for ``disable_after_s`` (ten minutes here, tries 5 s, 1 min and 10 min apart;
    ``omnipost worker --disable-webhooks-after``): disabled at the first failed try past it,
    its events held."""
    poster = EndpointPoster()
    async with ScriptedServer({"/hook": [Reply(503)]}) as receiver:
        engine = await engines.open(
            EngineSettings(
                events=CourierSettings(disable_after_s=600, poll_s=30, retry_s=(5, 60, 600, 3600))
            )
        )
        engine.event_post = _busy_post(clock, poster)
        await engine.tenant_add("acme")
        await engine.provider_add("p", "scripted")
        made = await engine.webhook_add("acme", receiver.url("/hook"), allow_private=True)
        view_id = made.endpoint.id
        await engine.start()
        await engine.enqueue("acme", "p", "a@example.com", send_at=clock.wall() + 86400)
        courier = engine.courier
        assert courier is not None
        await until(clock, lambda: bool(courier.disabled), within_s=2_000, step_s=5.0)
        await poster.aclose()
    [(endpoint_id, why)] = courier.disabled
    assert endpoint_id == view_id
    assert why == "every delivery failed for 665 s"  # 5 + 60 + 600 s after the first try
    [view] = await engine.webhooks("acme")
    assert view.endpoint.disabled_reason == why and view.health.held == 1
    assert len(receiver.seen("/hook")) == 4
