"""What ``Engine.plan`` reads from the store: the backlog, the enqueues of the last hours, the
providers' recent sends; and that it writes nothing there (SQLite and Postgres)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    BacklogTraffic,
    BurstTraffic,
    ConfigError,
    Engine,
    EnqueueItem,
    FakeClock,
    Limit,
    LimitChange,
    LocalLimiter,
    NotFound,
    ReplayTraffic,
    Store,
)
from testkit.stores import EngineFactory


async def _counts(store: Store) -> tuple[object, ...]:
    """Everything a plan could have written: counts, backlog, log, audit, circuits."""
    return (
        await store.notifications.recount(),
        await store.queue.backlog(),
        await store.stats.recent_sends(1000),
        await store.audit.entries(limit=1000),
        await store.circuits.all(),
    )


async def test_the_backlog_is_planned_from_the_kept_counts(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme", Limit(20, 1))
    await engine.tenant_add("zeta")
    await engine.provider_add("sim", "simulated", options={"latency_ms": "1"})
    await engine.enqueue_many(
        "acme", [EnqueueItem("sim", f"a{i}@x", {}, None, 0) for i in range(41)]
    )
    await engine.enqueue_many(
        "zeta", [EnqueueItem("sim", f"z{i}@x", {}, None, 0) for i in range(7)]
    )
    before = await _counts(engine.store)

    report = await engine.plan(
        BacklogTraffic(), changes=[LimitChange.parse("tenant:acme=40:1")], concurrency=4
    )

    assert await _counts(engine.store) == before  # nothing written, nothing sent
    acme, zeta = report.current.tenant("acme"), report.current.tenant("zeta")
    assert (acme.notifications, zeta.notifications) == (41, 7)
    assert acme.drain_s == pytest.approx(40 / 20 + 0.001, abs=0.01)
    assert acme.paced_by == "tenant:acme"
    assert report.proposed is not None
    assert report.proposed.concurrency == 4
    assert report.proposed.tenant("acme").drain_s == pytest.approx(40 / 40 + 0.001, abs=0.01)
    assert report.as_json()["proposed"]["tenants"]["acme"]["paced_by"] == "tenant:acme"


async def test_an_empty_backlog_is_an_empty_plan(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    report = await engine.plan(BacklogTraffic())
    assert (report.current.notifications, report.current.total_drain_s) == (0, 0.0)
    assert report.current.tenants == () and report.proposed is None


async def test_a_replay_keeps_the_enqueues_spacing_at_its_speed(store: Store) -> None:
    clock = FakeClock()
    engine = Engine(store, LocalLimiter(clock), BUILTIN_KINDS, clock=clock)
    await engine.open()
    try:
        await engine.tenant_add("acme")
        await engine.provider_add("sim", "simulated", options={"latency_ms": "1"})
        await engine.enqueue_many(
            "acme", [EnqueueItem("sim", f"old{i}@x", {}, None, 0) for i in range(3)]
        )
        clock.advance(7200)  # two hours ago: outside a one-hour replay
        await engine.enqueue_many(
            "acme", [EnqueueItem("sim", f"a{i}@x", {}, None, 0) for i in range(10)]
        )
        clock.advance(600)
        await engine.enqueue_many(
            "acme", [EnqueueItem("sim", f"b{i}@x", {}, None, 0) for i in range(5)]
        )
        clock.advance(60)

        as_it_was = await engine.plan(ReplayTraffic(1.0))
        faster = await engine.plan(ReplayTraffic(1.0, speed=10))
    finally:
        await engine.close()
    acme = as_it_was.current.tenant("acme")
    assert acme.notifications == 15
    # The replay starts with the hour's first enqueue; the last five came 600 s after it.
    assert acme.drain_s == pytest.approx(600.0, abs=0.05)
    assert faster.current.tenant("acme").drain_s == pytest.approx(60.0, abs=0.05)


async def test_real_providers_are_modelled_on_their_recent_sends(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("out", "file", options={"path": str(tmp_path / "out.jsonl")})
    await engine.provider_add("sim", "simulated", options={"latency_ms": "42", "seed": "3"})
    setup = await engine.plan_setup()
    assert setup.models["out"].source.startswith("assumed (only 0 recent sends")
    assert (setup.models["sim"].latency_ms, setup.models["sim"].source) == (42.0, "options")

    await engine.enqueue_many(
        "acme", [EnqueueItem("out", f"r{i}@x", {}, None, 0) for i in range(30)]
    )
    await engine.start()
    assert await engine.run_until_empty(timeout_s=30)
    model = (await engine.plan_setup()).models["out"]
    assert model.source == "observed (30 recent sends)"
    assert 0 < model.latency_ms < 1000 and model.throttle_rate == 0.0
    sends = await engine.store.stats.recent_sends(100)
    assert all(s.send_s is not None and s.send_s >= 0 for s in sends)


@pytest.mark.parametrize(
    ("kind", "options", "secrets"),
    [
        ("twilio", {"account_sid": "AC" + "0" * 32, "from": "+15550001111"}, {"auth_token": "t"}),
        ("apns", {"team_id": "TEAM123456", "key_id": "KEY1234567", "topic": "com.x"}, None),
    ],
)
async def test_sms_and_push_providers_are_planned_as_any_real_provider(
    make_engine: EngineFactory, kind: str, options: dict[str, str], secrets: dict[str, str] | None
) -> None:
    """Nothing is sent: the plan models the provider (assumed until it has sent) and paces the
    burst at its limit."""
    engine = await make_engine()
    await engine.tenant_add("acme")
    if secrets is None:  # apns: a real P-256 key, as the kind checks it when it is configured
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        secrets = {"signing_key": pem.decode()}
    await engine.provider_add("out", kind, Limit(10, 10), options, secrets)
    setup = await engine.plan_setup()
    assert setup.models["out"].source.startswith("assumed (only 0 recent sends")
    report = await engine.plan(BurstTraffic(("acme",), "out", 100))
    acme = report.current.tenant("acme")
    assert acme.notifications == 100
    assert acme.drain_s == pytest.approx(9.0, abs=0.2)  # 10 at once, then 10/s


async def test_a_plan_refuses_what_it_cannot_plan(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    with pytest.raises(NotFound, match="no provider named 'fax'"):
        await engine.plan(BurstTraffic(("acme",), "fax", 10))
    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        await engine.plan(BurstTraffic(("nobody",), "sim", 10))
    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        await engine.plan(BacklogTraffic(), changes=[LimitChange.parse("tenant:nobody=5")])
    with pytest.raises(ConfigError, match="count must be at least 1"):
        await engine.plan(BurstTraffic(("acme",), "sim", 0))
    with pytest.raises(ConfigError, match="more than 2,000,000"):
        await engine.plan(BurstTraffic(("acme",), "sim", 2_000_001))
    with pytest.raises(ConfigError, match="replay hours must be above 0 and at most 8,784, not -3"):
        ReplayTraffic(-3)
    with pytest.raises(ConfigError, match="not 1e"):
        ReplayTraffic(1e300)
    with pytest.raises(ConfigError, match=r"replay speed must be from 0\.001"):
        ReplayTraffic(1, speed=1e-300)
