"""Idempotent HTTP requests in the store (``Engine.request_claim`` and its kin), on both
stores: a new key is the caller's, a finished one replays or refuses another body, one under
a live lease is in flight, one whose lease ran out (its server died) is taken over, and
retention forgets a key once its notification is gone."""

from __future__ import annotations

import sqlalchemy as sa

from engine import ClaimKind, Engine, FakeClock, NotificationState, Store
from engine.store.schema import api_requests, notifications
from testkit.stores import EngineFactory

DAY_S = 86400.0


async def _engine(make_engine: EngineFactory) -> Engine:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.tenant_add("beta")
    await engine.provider_add("sim", "simulated")
    return engine


async def test_claim_finish_replay_mismatch_and_abandon(make_engine: EngineFactory) -> None:
    engine = await _engine(make_engine)
    first = await engine.request_claim("acme", "k1", "a" * 64, owner="one")
    assert first.kind is ClaimKind.NEW
    busy = await engine.request_claim("acme", "k1", "a" * 64, owner="two")
    assert busy.kind is ClaimKind.IN_FLIGHT and 0 < busy.retry_after_s <= 5
    other = await engine.request_claim("acme", "k1", "b" * 64, owner="two")
    assert other.kind is ClaimKind.MISMATCH
    # The same key is another tenant's own.
    assert (await engine.request_claim("beta", "k1", "b" * 64, owner="x")).kind is ClaimKind.NEW

    assert not await engine.request_finish(
        "acme", "k1", owner="two", status=202, response="{}", notification_id=None
    )  # not its owner
    assert await engine.request_finish(
        "acme", "k1", owner="one", status=202, response='{"id": 7}', notification_id=7
    )
    replay = await engine.request_claim("acme", "k1", "a" * 64, owner="three")
    assert (replay.kind, replay.status, replay.response) == (ClaimKind.REPLAY, 202, '{"id": 7}')
    assert (await engine.request_claim("acme", "k1", "c" * 64, owner="3")).kind is (
        ClaimKind.MISMATCH
    )

    assert (await engine.request_claim("acme", "k2", "a" * 64, owner="one")).kind is ClaimKind.NEW
    assert not await engine.request_abandon("acme", "k2", owner="other")
    assert await engine.request_abandon("acme", "k2", owner="one")
    assert (await engine.request_claim("acme", "k2", "d" * 64, owner="two")).kind is ClaimKind.NEW


async def test_a_lease_that_ran_out_is_taken_over(store: Store) -> None:
    from engine import BUILTIN_KINDS, LocalLimiter

    clock = FakeClock(start=1_000_000.0)
    async with Engine(store, LocalLimiter(clock), BUILTIN_KINDS, clock=clock) as engine:
        await engine.tenant_add("acme")
        assert (await engine.request_claim("acme", "k", "f" * 64, owner="dead")).kind is (
            ClaimKind.NEW
        )
        clock.advance(4.9)
        assert (await engine.request_claim("acme", "k", "f" * 64, owner="me")).kind is (
            ClaimKind.IN_FLIGHT
        )
        clock.advance(0.2)
        assert (await engine.request_claim("acme", "k", "f" * 64, owner="me")).kind is (
            ClaimKind.NEW
        )
        # The dead server's late finish cannot overwrite its successor's answer.
        assert not await engine.request_finish(
            "acme", "k", owner="dead", status=202, response="{}", notification_id=None
        )
        assert await engine.request_finish(
            "acme", "k", owner="me", status=202, response="{}", notification_id=None
        )


async def test_retention_forgets_a_key_once_its_notification_is_gone(
    make_engine: EngineFactory, store: Store
) -> None:
    engine = await _engine(make_engine)
    kept = await engine.enqueue("acme", "sim", "a@example.com")
    gone = await engine.enqueue("acme", "sim", "b@example.com")
    for key, result in (("kept", kept), ("gone", gone)):
        assert (await engine.request_claim("acme", key, "a" * 64, owner="o")).kind is (
            ClaimKind.NEW
        )
        await engine.request_finish(
            "acme", key, owner="o", status=202, response="{}", notification_id=result.id
        )
    old = engine.clock.wall() - 8 * DAY_S
    async with store._db.engine.begin() as conn:  # delivered 8 days ago, and asked then
        await conn.execute(
            sa.update(notifications)
            .where(notifications.c.id.in_([kept.id, gone.id]))
            .values(state=NotificationState.DELIVERED.value, finished_at=old)
        )
        await conn.execute(
            sa.update(notifications).where(notifications.c.id == kept.id).values(finished_at=None)
        )
        await conn.execute(sa.update(api_requests).values(created_at=old))
    assert (await engine.prune(dry_run=True)).api_requests == 0  # the notification is still there
    report = await engine.prune()
    assert report.delivered == 1 and report.api_requests == 1
    assert (await engine.request_claim("acme", "gone", "b" * 64, owner="p")).kind is ClaimKind.NEW
    assert (await engine.request_claim("acme", "kept", "b" * 64, owner="p")).kind is (
        ClaimKind.MISMATCH
    )
