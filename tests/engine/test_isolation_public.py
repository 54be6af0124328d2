"""Tenant isolation through the public faces: every ``Engine`` read and write that takes a
tenant, and ``omnipost dead ... --tenant``, given another tenant's ids, reaches nothing and
changes nothing. (``test_store_isolation`` checks the same one layer down, on the store.)
Runs on SQLite and on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from engine import Engine, EnqueueItem, Limit, NotFound, NotificationState
from engine.store import normalize_url
from engine.store.schema import metadata
from testkit.cli import Cli, assert_one_sentence
from testkit.stores import EngineFactory


@dataclass(frozen=True)
class World:
    """acme: one dead, one delivered and one queued notification (key "shared");
    beta: one dead and one queued notification of its own."""

    dead: int
    delivered: int
    queued: int
    beta_dead: int
    beta_queued: int

    @property
    def acme_ids(self) -> list[int]:
        return [self.dead, self.delivered, self.queued]


async def build(make_engine: EngineFactory) -> tuple[Engine, World]:
    """Deliveries run on one engine, which is then stopped; the probes use a second one."""
    runner = await make_engine(concurrency=4)
    await runner.tenant_add("acme")
    await runner.tenant_add("beta")
    await runner.provider_add("sim", "simulated", options={"latency_ms": "0"})
    options = {"latency_ms": "0", "permanent_rate": "1"}
    await runner.provider_add("bounce", "simulated", options=options)
    await runner.start()
    dead = await runner.enqueue("acme", "bounce", "+15550000001", key="acme-dead")
    delivered = await runner.enqueue("acme", "sim", "+15550000002", key="acme-delivered")
    beta_dead = await runner.enqueue("beta", "bounce", "+15550000003", key="beta-dead")
    assert await runner.run_until_empty(timeout_s=60)
    await runner.stop()

    engine = await make_engine()
    queued = await engine.enqueue("acme", "sim", "+15550000004", key="shared")
    beta_queued = await engine.enqueue("beta", "sim", "+15550000005", key="beta-own")
    world = World(dead.id, delivered.id, queued.id, beta_dead.id, beta_queued.id)
    states = {v.id: v.state for v in await engine.notifications("acme")}
    assert states == {
        world.dead: NotificationState.DEAD,
        world.delivered: NotificationState.DELIVERED,
        world.queued: NotificationState.QUEUED,
    }
    return engine, world


async def everything(engine: Engine) -> object:
    """Both tenants' notifications, deliveries, depth and audit trail, read from the store."""
    store = engine.store
    tenants = {t.name: t.id for t in await engine.tenants()}
    return [
        *[await store.notifications.list_by_tenant(tenants[name]) for name in ("acme", "beta")],
        *[await store.notifications.deliveries(tenants[name]) for name in ("acme", "beta")],
        sorted(await store.notifications.depth(), key=lambda r: (r.tenant_id, r.state.value)),
        await store.audit.entries(),
    ]


Probe = Callable[[], Awaitable[object]]


def probes(engine: Engine, w: World) -> list[tuple[str, Probe, object]]:
    """(what, a call as tenant beta naming acme's ids, what it must return)."""

    async def listed(state: NotificationState | None) -> list[int]:
        return [v.id for v in await engine.notifications("beta", state=state)]

    async def dead() -> list[int]:
        return [v.id for _, v in await engine.dead("beta")]

    return [
        ("notifications", lambda: listed(None), [w.beta_dead, w.beta_queued]),
        ("queued", lambda: listed(NotificationState.QUEUED), [w.beta_queued]),
        ("delivered", lambda: listed(NotificationState.DELIVERED), []),
        ("dead", lambda: listed(NotificationState.DEAD), [w.beta_dead]),
        ("dead letters", dead, [w.beta_dead]),
        ("retry a dead one", lambda: engine.dead_retry([w.dead], tenant="beta"), 0),
        ("retry all ids", lambda: engine.dead_retry(w.acme_ids, tenant="beta"), 0),
        ("discard a dead one", lambda: engine.dead_discard([w.dead], tenant="beta"), 0),
        ("discard all ids", lambda: engine.dead_discard(w.acme_ids, tenant="beta"), 0),
    ]


async def test_another_tenants_ids_reach_nothing(make_engine: EngineFactory) -> None:
    engine, world = await build(make_engine)
    before = await everything(engine)
    for what, probe, expected in probes(engine, world):
        assert await probe() == expected, what
        assert await everything(engine) == before, what


async def test_a_tenant_that_does_not_exist_is_refused(make_engine: EngineFactory) -> None:
    engine, world = await build(make_engine)
    before = await everything(engine)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: engine.notifications("nobody"),
        lambda: engine.dead("nobody"),
        lambda: engine.dead_retry([world.dead], tenant="nobody"),
        lambda: engine.dead_discard([world.dead], tenant="nobody"),
        lambda: engine.enqueue("nobody", "sim", "+15550000009", key="shared"),
        lambda: engine.pair_limit_set("nobody", "sim", Limit(1, 1)),
        lambda: engine.tenant_update("nobody", enabled=False),
    ]
    for n, call in enumerate(calls):
        with pytest.raises(NotFound, match="nobody"):
            await call()
        assert await everything(engine) == before, n


async def test_writes_as_one_tenant_touch_only_its_own(make_engine: EngineFactory) -> None:
    engine, world = await build(make_engine)
    acme_before = await engine.notifications("acme")

    # acme's idempotency keys mean nothing to beta: each is a new notification of beta's.
    shared = await engine.enqueue("beta", "sim", "+15550000006", key="shared")
    assert not shared.duplicate and shared.id not in world.acme_ids
    [again] = await engine.enqueue_many(
        "beta", [EnqueueItem("sim", "+15550000007", {}, "acme-dead", 0)]
    )
    assert not again.duplicate and again.id not in world.acme_ids
    mine = await engine.enqueue("acme", "sim", "+15550000008", key="shared")
    assert mine.duplicate and mine.id == world.queued, "the same key in acme is acme's own"

    # "All of beta's" dead letters are beta's only.
    assert await engine.dead_retry(None, tenant="beta") == 1
    assert await engine.dead_discard(None, tenant="beta") == 0
    assert [v.id for _, v in await engine.dead("acme")] == [world.dead]
    assert [(t, v.id) for t, v in await engine.dead()] == [("acme", world.dead)]

    # Limits and flags set on beta leave acme's alone.
    await engine.pair_limit_set("beta", "sim", Limit(1, 1))
    await engine.tenant_update("beta", enabled=False)
    acme = next(t for t in await engine.tenants() if t.name == "acme")
    assert acme.enabled and acme.limit is None
    assert [p.tenant for p in await engine.store.config.pair_limits()] == ["beta"]

    assert await engine.notifications("acme") == acme_before
    beta_ids = {v.id for v in await engine.notifications("beta")}
    assert beta_ids == {world.beta_dead, world.beta_queued, shared.id, again.id}


# -- the command line ----------------------------------------------------------------------


async def _dump(url: str) -> list[list[tuple[object, ...]]]:
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            return [
                [tuple(r) for r in await conn.execute(sa.select(t).order_by(*t.primary_key))]
                for t in metadata.sorted_tables
                if t.name != "workers"  # heartbeats of the commands' own engines
            ]
    finally:
        await engine.dispose()


def dump(url: str) -> list[list[tuple[object, ...]]]:
    return asyncio.run(_dump(url))


def test_dead_commands_with_another_tenant_change_nothing(cli: Cli, store_url: str) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("tenant", "add", "other")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "permanent_rate=1")
    cli.ok("enqueue", "acme", "sim", "+15550000001", "--key", "acme-key")
    cli.ok("worker", "--until-empty", "--quiet")
    [dead] = cli.json("dead", "list", "--tenant", "acme")
    dead_id = str(dead["id"])

    before = dump(store_url)
    for action, verb in (("retry", "queued again"), ("discard", "discarded")):
        result = cli("dead", action, dead_id, "--tenant", "other")
        assert result.code == 2, result
        assert result.out == f"0 dead notifications {verb}\n"
        assert_one_sentence(result.err)
        assert "1 of the IDs are not dead notifications of other." in result.err
        assert dump(store_url) == before, action
    assert cli.json("dead", "list", "--tenant", "other") == []
    assert dump(store_url) == before

    # The same key in another tenant is a new notification there, not acme's.
    out = cli.ok("enqueue", "other", "sim", "+15550000002", "--key", "acme-key")
    assert out.startswith("queued as ") and f"queued as {dead_id} " not in out
    assert cli.json("dead", "list", "--tenant", "acme") == [dead]
    # With the right tenant the same command does reach it: the refusal above was isolation.
    assert cli.ok("dead", "retry", dead_id, "--tenant", "acme") == (
        "1 dead notification queued again\n"
    )
