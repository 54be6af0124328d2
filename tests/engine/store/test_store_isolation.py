"""Tenant isolation: every tenant-scoped read or write, given another tenant's id, returns nothing
and changes nothing. Runs on SQLite and on Postgres."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engine.core.domain import NotificationState, Outcome
from engine.store import Completion, Store
from testkit.support import new_notification

T0 = 1_700_000_000.0


@dataclass(frozen=True)
class World:
    acme: int
    beta: int
    sms: int
    mail: int
    queued: int  # acme's
    dead: int  # acme's
    delivered: int  # acme's, with a delivery log row
    beta_own: int  # beta's only notification, through another provider

    @property
    def acme_ids(self) -> list[int]:
        return [self.queued, self.dead, self.delivered]


async def build(store: Store) -> World:
    cfg = store.config
    acme = (await cfg.tenant_add("acme", None, now=T0, actor="t")).id
    beta = (await cfg.tenant_add("beta", None, now=T0, actor="t")).id
    sms = (await cfg.provider_add("sms", "simulated", None, {}, {}, now=T0, actor="t")).id
    mail = (await cfg.provider_add("mail", "simulated", None, {}, {}, now=T0, actor="t")).id

    results = await store.queue.enqueue(
        acme, [new_notification(sms, "dead"), new_notification(sms, "delivered")], now=T0
    )
    [dead, delivered] = [r.id for r in results]
    leased = await store.queue.claim(acme, sms, 2, owner="w", lease_s=30, now=T0)
    outcome = {dead: (Outcome.PERMANENT, NotificationState.DEAD)}
    completions = [
        Completion(i, *outcome.get(i.id, (Outcome.DELIVERED, NotificationState.DELIVERED)), ts=T0)
        for i in leased
    ]
    assert await store.queue.complete(completions, worker="w") == [True, True]
    [queued] = await store.queue.enqueue(acme, [new_notification(sms, "shared-key")], now=T0)

    # The same idempotency key in another tenant is a different notification.
    [beta_own] = await store.queue.enqueue(beta, [new_notification(mail, "shared-key")], now=T0)
    assert not beta_own.duplicate and beta_own.id != queued.id
    return World(acme, beta, sms, mail, queued.id, dead, delivered, beta_own.id)


async def everything(store: Store, world: World) -> object:
    """What both tenants' data looks like, to check that a probe changed none of it."""
    return [
        await store.notifications.list_by_tenant(world.acme),
        await store.notifications.list_by_tenant(world.beta),
        await store.notifications.deliveries(world.acme),
        await store.notifications.deliveries(world.beta),
        sorted(await store.notifications.depth(), key=lambda r: (r.tenant_id, r.state.value)),
    ]


Probe = Callable[[int], Awaitable[object]]


def probes(store: Store, w: World) -> list[tuple[str, Probe, object]]:
    """(what, a call made with another tenant's id, what it must return)."""
    queue, notifications = store.queue, store.notifications

    async def listed(other: int) -> list[int]:
        return [v.id for v in await notifications.list_by_tenant(other) if v.id in w.acme_ids]

    async def due(other: int) -> list[int]:
        return [k.tenant_id for k in await queue.due_pairs(T0 + 1, [other]) if k.tenant_id != other]

    return [
        ("get queued", lambda other: notifications.get(other, w.queued), None),
        ("get dead", lambda other: notifications.get(other, w.dead), None),
        ("get delivered", lambda other: notifications.get(other, w.delivered), None),
        ("list", listed, []),
        (
            "list dead",
            lambda other: notifications.list_by_tenant(other, state=NotificationState.DEAD),
            [],
        ),
        (
            "list delivered",
            lambda other: notifications.list_by_tenant(other, state=NotificationState.DELIVERED),
            [],
        ),
        ("retry dead by id", lambda other: notifications.dead_retry(other, [w.dead], now=T0), 0),
        ("retry any by id", lambda other: notifications.dead_retry(other, w.acme_ids, now=T0), 0),
        ("retry all dead", lambda other: notifications.dead_retry(other, None, now=T0), 0),
        ("discard dead by id", lambda other: notifications.dead_discard(other, [w.dead]), 0),
        ("discard any by id", lambda other: notifications.dead_discard(other, w.acme_ids), 0),
        ("discard all dead", lambda other: notifications.dead_discard(other, None), 0),
        ("deliveries", notifications.deliveries, []),
        (
            "deliveries of a notification",
            lambda other: notifications.deliveries(other, notification_id=w.delivered),
            [],
        ),
        (
            "claim of the other tenant's pair",
            lambda other: queue.claim(other, w.sms, 10, owner="x", lease_s=5, now=T0 + 1),
            [],
        ),
        ("due pairs", due, []),
    ]


async def test_another_tenants_id_reaches_nothing(store: Store) -> None:
    world = await build(store)
    before = await everything(store, world)
    no_such_tenant = world.acme + world.beta + 1000
    for other in (world.beta, no_such_tenant):
        for what, probe, expected in probes(store, world):
            assert await probe(other) == expected, f"{what} as tenant {other}"
            assert await everything(store, world) == before, f"{what} as tenant {other}"


async def test_each_tenant_still_reaches_its_own(store: Store) -> None:
    """The probes above can fail: with the owner's id, the same calls do reach the data."""
    world = await build(store)
    queue, notifications = store.queue, store.notifications
    assert [v.id for v in await notifications.list_by_tenant(world.acme)] == sorted(world.acme_ids)
    assert (await notifications.get(world.beta, world.beta_own)) is not None
    log_ids = [e.notification_id for e in await notifications.deliveries(world.acme)]
    assert log_ids == [world.delivered, world.dead]
    assert [k.tenant_id for k in await queue.due_pairs(T0 + 1, [world.acme])] == [world.acme]
    log = await notifications.deliveries(world.acme, notification_id=world.delivered)
    assert [e.outcome for e in log] == [Outcome.DELIVERED]
    [leased] = await queue.claim(world.acme, world.sms, 10, owner="x", lease_s=5, now=T0 + 1)
    assert leased.id == world.queued
    assert [
        v.id for v in await notifications.list_by_tenant(world.acme, state=NotificationState.DEAD)
    ] == [world.dead]
    assert await notifications.dead_retry(world.acme, [world.dead], now=T0) == 1
    assert await notifications.dead_discard(world.acme, None) == 0
    assert await queue.release("x", [leased]) == 1
