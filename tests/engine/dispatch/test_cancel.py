"""Cancelling a queued notification: the one state change it makes (and the ones it refuses),
the same answer for a missing id and another tenant's, its audit, a dispatcher that neither
sends it nor spins over its key, retention, the counts, and ``omnipost cancel``.

Every test that touches the store runs on SQLite and on Postgres (``store`` is parametrized in
tests/conftest.py); the engines run on virtual time (testkit/virtual_time.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from app.metrics import families
from engine import (
    Conflict,
    DispatcherSettings,
    Engine,
    EngineSettings,
    FakeClock,
    Limit,
    NotCancellable,
    NotFound,
    NotificationState,
    Outcome,
    PruneReport,
    Retention,
    Store,
)
from engine.store import Completion
from testkit.cli import Cli, assert_one_sentence
from testkit.scripted import Script, history, setup, view
from testkit.support import delivered_at, new_notification
from testkit.virtual_time import VirtualEngines, until

QUEUED = NotificationState.QUEUED
LEASED = NotificationState.LEASED
DELIVERED = NotificationState.DELIVERED
DEAD = NotificationState.DEAD
CANCELLED = NotificationState.CANCELLED
DAY = 86_400.0
T0 = 1_700_000_000.0


def ids_of(engine: Engine, tenant: str = "acme", provider: str = "p") -> tuple[int, int]:
    tenant_id = engine.directory.tenant_id(tenant)
    provider_id = engine.directory.provider_id(provider)
    assert tenant_id is not None and provider_id is not None
    return tenant_id, provider_id


# -- the state change --------------------------------------------------------------------------


async def test_a_cancelled_notification_is_finished_and_never_sent(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    first, second, third = await setup(engine, 3)
    cancelled = await engine.notification_cancel("acme", second)
    assert (cancelled.id, cancelled.state) == (second, CANCELLED)
    assert cancelled.finished_at == clock.wall()
    assert cancelled.recipient_masked != "user1@example.com"  # a view: masked
    assert await view(engine, second) == cancelled

    await engine.start()
    await engines.until_empty(engine)
    await engine.stop()
    assert sorted(c.message.notification_id for c in script.calls) == [first, third]
    assert (await view(engine, second)).state is CANCELLED
    assert await history(engine, second) == []  # no send was tried
    assert [(await view(engine, i)).state for i in (first, third)] == [DELIVERED, DELIVERED]


async def _leased(engine: Engine, nid: int) -> None:
    tenant_id, provider_id = ids_of(engine)
    [got] = await engine.store.queue.claim(
        tenant_id, provider_id, 1, owner="elsewhere", lease_s=30.0, now=engine.clock.wall()
    )
    assert got.id == nid


async def _finished(engine: Engine, nid: int, state: NotificationState) -> None:
    tenant_id, provider_id = ids_of(engine)
    wall = engine.clock.wall()
    [got] = await engine.store.queue.claim(
        tenant_id, provider_id, 1, owner="elsewhere", lease_s=30.0, now=wall
    )
    done = (
        delivered_at(got, wall)
        if state is DELIVERED
        else Completion(got, Outcome.PERMANENT, DEAD, "no such number", ts=wall)
    )
    assert await engine.store.queue.complete([done], worker="elsewhere") == [True]


async def _delivered(engine: Engine, nid: int) -> None:
    await _finished(engine, nid, DELIVERED)


async def _dead(engine: Engine, nid: int) -> None:
    await _finished(engine, nid, DEAD)


async def _cancelled(engine: Engine, nid: int) -> None:
    await engine.notification_cancel("acme", nid)


MAKE: dict[NotificationState, Callable[[Engine, int], Awaitable[None]]] = {
    LEASED: _leased,
    DELIVERED: _delivered,
    DEAD: _dead,
    CANCELLED: _cancelled,
}


@pytest.mark.parametrize("state", list(MAKE), ids=str)
async def test_only_a_queued_notification_can_be_cancelled(
    engines: VirtualEngines, state: NotificationState
) -> None:
    engine = await engines.open()
    [nid] = await setup(engine, 1)
    await MAKE[state](engine, nid)
    before = await view(engine, nid)
    assert before.state is state
    audited = len(await engine.store.audit.entries())

    with pytest.raises(NotCancellable) as raised:
        await engine.notification_cancel("acme", nid)
    assert isinstance(raised.value, Conflict)
    assert raised.value.state is state
    assert raised.value.message == (
        f"notification {nid} is {state.value}; only a queued or scheduled notification "
        "can be cancelled."
    )
    assert await view(engine, nid) == before  # untouched
    assert len(await engine.store.audit.entries()) == audited  # nothing audited


async def test_a_missing_id_and_another_tenants_id_are_the_same_not_found(
    engines: VirtualEngines,
) -> None:
    engine = await engines.open()
    [mine] = await setup(engine, 1)
    await engine.tenant_add("beta")
    queued = (await engine.enqueue("beta", "p", "b1@example.com")).id
    finished = (await engine.enqueue("beta", "p", "b2@example.com")).id
    await engine.notification_cancel("beta", finished)  # not queued: must not say so to acme either
    missing = finished + 1000

    said: dict[int, str] = {}
    for nid in (queued, finished, missing, 2**64):
        with pytest.raises(NotFound) as raised:
            await engine.notification_cancel("acme", nid)
        assert type(raised.value) is NotFound
        said[nid] = raised.value.message
    assert {nid: text.replace(str(nid), "N") for nid, text in said.items()} == dict.fromkeys(
        said, "there is no notification N for this tenant."
    )
    beta = engine.directory.tenant_id("beta")
    assert beta is not None
    states = [(await engine.store.notifications.get(beta, i)) for i in (queued, finished)]
    assert [v.state for v in states if v is not None] == [QUEUED, CANCELLED]
    assert (await view(engine, mine)).state is QUEUED

    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        await engine.notification_cancel("nobody", mine)


async def test_each_cancel_is_audited(engines: VirtualEngines) -> None:
    engine = await engines.open()
    first, second = await setup(engine, 2)
    await engine.notification_cancel("acme", second)
    await engine.notification_cancel("acme", first)
    tenant_id, _ = ids_of(engine)
    entries = (await engine.store.audit.entries(limit=2))[::-1]
    assert [(e.actor, e.action, e.tenant_id, e.detail) for e in entries] == [
        (engine.actor, "notification.cancel", tenant_id, {"id": second}),
        (engine.actor, "notification.cancel", tenant_id, {"id": first}),
    ]
    assert "user" not in json.dumps([e.detail for e in entries])  # no recipient


# -- the dispatcher ------------------------------------------------------------------------------


async def test_a_key_whose_rows_were_cancelled_neither_spins_nor_holds_up_new_work(
    engines: VirtualEngines, script: Script, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """acme at 1/s (burst 1): the first of five goes at once, the dispatcher's book counts the
    other four as due, and they are cancelled while the key waits for its token. No claim is
    made for them, the loop sleeps rather than spins, and a notification enqueued after them
    goes out with the key's next token."""
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=4, poll_s=60.0))
    engine = await engines.open(settings)
    ids = await setup(engine, 5)
    await engine.tenant_update("acme", limit=Limit(1.0, 1.0))
    claims: list[float] = []
    sleeps: list[float] = []
    real_claim = engine.store.queue.claim_many

    async def claim_many(asks: Any, **kwargs: Any) -> Any:
        claims.append(clock.monotonic())
        return await real_claim(asks, **kwargs)

    monkeypatch.setattr(engine.store.queue, "claim_many", claim_many)
    engine.dispatcher.on_wait = sleeps.append
    await engine.start()
    await until(clock, lambda: len(script.calls) == 1, what="the first send")
    for nid in ids[1:]:
        assert (await engine.notification_cancel("acme", nid)).state is CANCELLED
    claims.clear()
    sleeps.clear()
    await clock.sleep(10.0)
    assert len(script.calls) == 1
    assert claims == [], "a claim for cancelled rows"
    assert len(sleeps) <= 3, sleeps  # asleep, not spinning

    later = (await engine.enqueue("acme", "p", "late@example.com", key="late")).id
    took_s = await until(clock, lambda: len(script.calls) == 2, what="the later send")
    assert took_s < 0.1, took_s  # its token is there: 10 s passed since the last send
    assert script.calls[1].message.notification_id == later
    await engine.stop()
    assert [(await view(engine, i)).state for i in ids] == [DELIVERED] + [CANCELLED] * 4


# -- retention and counts ----------------------------------------------------------------------


async def _cancelled_rows(store: Store, ages_d: Sequence[float]) -> tuple[int, list[int]]:
    """A tenant with one cancelled notification per age (days before T0); its id and theirs."""
    config = store.config
    tenant = (await config.tenant_add("acme", None, now=T0, actor="test")).id
    provider = (await config.provider_add("p", "simulated", None, {}, {}, now=T0, actor="t")).id
    made = await store.queue.enqueue(
        tenant, [new_notification(provider, f"k{i}") for i in range(len(ages_d))], now=T0 - 60 * DAY
    )
    for row, age_d in zip(made, ages_d, strict=True):
        await store.notifications.cancel(tenant, row.id, now=T0 - age_d * DAY)
    return tenant, [r.id for r in made]


@pytest.mark.parametrize(
    ("retention", "kept_ages_d"),
    [
        (Retention(delivered_s=1 * DAY, dead_s=30 * DAY), [1, 29]),  # by the dead window
        (Retention(delivered_s=40 * DAY, dead_s=2 * DAY), [1]),  # not by the delivered one
        (Retention(dead_s=None), [1, 29, 31, 45]),  # dead letters kept forever: these too
    ],
)
async def test_retention_deletes_cancelled_rows_by_the_dead_letter_window(
    store: Store, retention: Retention, kept_ages_d: list[float]
) -> None:
    ages_d = [1, 29, 31, 45]
    tenant, ids = await _cancelled_rows(store, ages_d)
    gone = len(ages_d) - len(kept_ages_d)

    dry = await store.maintenance.prune(retention, now=T0, dry_run=True)
    assert (dry.cancelled, dry.total, dry.dry_run) == (gone, gone, True)
    report = await store.maintenance.prune(retention, now=T0)
    assert report == PruneReport(cancelled=gone)
    assert report.total == gone
    kept = [i for i, _ in zip(ids, ages_d, strict=True) if await store.notifications.get(tenant, i)]
    assert kept == [i for i, age in zip(ids, ages_d, strict=True) if age in kept_ages_d]
    assert await store.notifications.depth() == await store.notifications.recount()


async def test_cancelled_notifications_are_counted(engines: VirtualEngines) -> None:
    engine = await engines.open()
    ids = await setup(engine, 3)
    for nid in ids[:2]:
        await engine.notification_cancel("acme", nid)
    assert await engine.store.notifications.depth() == await engine.store.notifications.recount()
    snap = await engine.snapshot()
    [acme] = snap.depth
    assert (acme.tenant, acme.queued, acme.cancelled) == ("acme", 1, 2)
    assert snap.queue is not None
    assert (snap.queue.queued, snap.queue.cancelled) == (1, 2)
    depth = {
        (s.labels["tenant"], s.labels["state"]): s.value
        for family in families(snap, snap.ts)
        if family.name == "omnipost_queue_depth"
        for s in family.samples
    }
    assert (depth["acme", "queued"], depth["acme", "cancelled"]) == (1, 2)
    listed = await engine.notifications("acme", state=CANCELLED)
    assert [v.id for v in listed] == ids[:2]
    assert [v.id for v in await engine.notifications_newest(CANCELLED)] == ids[1::-1]


# -- omnipost cancel ---------------------------------------------------------------------------


def _enqueue(cli: Cli, tenant: str, key: str) -> int:
    out = cli.ok("enqueue", tenant, "sim", f"+1555000{len(key):04d}", "--key", key)
    match = re.fullmatch(rf"queued as (\d+) \(key {key}\)\n", out)
    assert match, out
    return int(match.group(1))


def test_the_cancel_command(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("tenant", "add", "beta")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=1")
    first, second, third = (_enqueue(cli, "acme", k) for k in ("a1", "a2", "a3"))
    beta = _enqueue(cli, "beta", "b1")

    result = cli("cancel", "acme", str(first), str(second), str(first))  # each once
    assert (result.code, result.out, result.err) == (
        0,
        f"cancelled {first}\ncancelled {second}\n",
        "",
    )
    assert "delivered 2 " in cli.ok("worker", "--until-empty", "--quiet")  # third and beta

    missing = beta + 100
    result = cli("cancel", "acme", str(first), str(third), str(beta), str(missing))
    assert (result.code, result.out) == (1, "")
    only = "only a queued or scheduled notification can be cancelled."
    assert result.err.splitlines() == [
        f"omnipost: notification {first} is cancelled; {only}",
        f"omnipost: notification {third} is delivered; {only}",
        f"omnipost: there is no notification {beta} for this tenant.",
        f"omnipost: there is no notification {missing} for this tenant.",
    ]
    for line in result.err.splitlines():
        assert_one_sentence(line)

    result = cli("cancel", "acme", str(third), str(missing), "--json")
    assert result.code == 1
    assert json.loads(result.out) == [
        {
            "id": third,
            "state": "delivered",
            "cancelled": False,
            "error": f"notification {third} is delivered; only a queued or scheduled notification "
            "can be cancelled.",
        },
        {
            "id": missing,
            "state": None,
            "cancelled": False,
            "error": f"there is no notification {missing} for this tenant.",
        },
    ]
    fresh = _enqueue(cli, "acme", "a4")
    assert cli.json("cancel", "acme", str(fresh)) == [
        {"id": fresh, "state": "cancelled", "cancelled": True}
    ]

    result = cli("cancel", "nobody", str(fresh))
    assert result.code == 2
    assert_one_sentence(result.err)
    assert "no tenant named 'nobody'" in result.err
    result = cli("cancel", "acme")
    assert result.code == 2 and "Traceback" not in result.err

    stats = cli.json("stats")
    assert {d["tenant"]: (d["delivered"], d["cancelled"]) for d in stats["depth"]} == {
        "acme": (1, 3),
        "beta": (1, 0),
    }
    assert stats["queue"]["cancelled"] == 3
    text = cli.ok("stats")
    header = (
        "TENANT  QUEUED  SCHEDULED  IN FLIGHT  DELIVERED  DEAD  CANCELLED  SUPPRESSED  EXPIRED"
        "  OLDEST QUEUED"
    )
    assert header in text
    assert re.search(r"^acme +0 +0 +0 +1 +0 +3 +0 +0 +-$", text, re.MULTILINE), text
    assert "dead 0, cancelled 3, suppressed 0, scheduled 0, expired 0;" in text
    assert cli.json("prune", "--dry-run")["cancelled"] == 0  # all cancelled just now
