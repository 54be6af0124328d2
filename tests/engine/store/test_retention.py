"""Retention: the age syntax, what a prune pass deletes (and never deletes), its batches, keys
forgotten with their notification, windows shared through the store, one pruner among many
engines, and a SQLite file that stops growing.

Rows are made through the queue and then finished and aged with direct SQL, which is fine for
a test: the count triggers see direct SQL as they see the store's own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncConnection

from engine import (
    BUILTIN_KINDS,
    ConfigError,
    Engine,
    EngineSettings,
    FakeClock,
    LocalLimiter,
    NotificationState,
    Outcome,
    PruneReport,
    Retention,
    SecretBox,
    Store,
    SystemClock,
    format_age,
    parse_age,
)
from engine.core.clock import Clock
from engine.store import Completion, EnqueueResult
from engine.store.schema import audit_log, chore_leases, delivery_log, notifications
from testkit.retention import ACTOR, DAY, HOUR, MINUTE, T0, WEEK, Keys, make_keys
from testkit.support import eventually, new_notification

QUEUED = NotificationState.QUEUED
LEASED = NotificationState.LEASED
DELIVERED = NotificationState.DELIVERED
DEAD = NotificationState.DEAD
N = notifications


# -- helpers -------------------------------------------------------------------------------------


@pytest.fixture
async def keys(store: Store) -> Keys:
    return await make_keys(store)


async def enqueue(
    store: Store,
    tenant: int,
    provider: int,
    names: Sequence[str],
    *,
    now: float = T0,
    payload: dict[str, Any] | None = None,
) -> list[int]:
    results = await store.queue.enqueue(
        tenant, [new_notification(provider, k, payload) for k in names], now=now
    )
    return [r.id for r in results]


# One row's state and instants, set by id (executemany). Bind names differ from the columns'.
_SET_ROW = (
    N.update()
    .where(N.c.id == sa.bindparam("row_id"))
    .values(
        state=sa.bindparam("to_state"),
        finished_at=sa.bindparam("to_finished"),
        enqueued_at=sa.bindparam("to_enqueued"),
        available_at=sa.bindparam("to_available"),
        lease_owner=sa.bindparam("to_owner"),
        lease_expires_at=sa.bindparam("to_expires"),
    )
)


def aged(row_id: int, state: NotificationState, at: float) -> dict[str, Any]:
    """``row_id`` put in ``state`` as of ``at``: enqueued, due and (even when queued or leased,
    to show that the state alone protects those) finished then."""
    leased = state is LEASED
    return {
        "row_id": row_id,
        "to_state": state.value,
        "to_finished": at,
        "to_enqueued": at,
        "to_available": at,
        "to_owner": "w-test" if leased else None,
        "to_expires": at + 30.0 if leased else None,
    }


async def run_sql(store: Store, stmt: sa.Executable, rows: Sequence[dict[str, Any]] = ()) -> None:
    """One write transaction of the store's own kind (BEGIN IMMEDIATE on SQLite)."""

    async def tx(conn: AsyncConnection) -> None:
        if rows:
            await conn.execute(stmt, list(rows))
        else:
            await conn.execute(stmt)

    await store._db.write(tx)


async def set_rows(store: Store, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        await run_sql(store, _SET_ROW, rows)


async def ids(store: Store, table: sa.Table) -> set[int]:
    async def tx(conn: AsyncConnection) -> set[int]:
        return {r[0] for r in await conn.execute(sa.select(table.c.id))}

    return await store._db.read(tx)


async def counts_match(store: Store) -> None:
    assert await store.notifications.depth() == await store.notifications.recount()


def open_engine(store: Store, clock: Clock, settings: EngineSettings | None = None) -> Engine:
    return Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, clock=clock, settings=settings)


# -- 1: the age syntax -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("12h", 12 * HOUR),
        ("7d", 7 * DAY),
        ("1d12h", 36 * HOUR),
        ("2w", 2 * WEEK),
        ("90m", 90 * MINUTE),
        ("3600s", HOUR),
        ("45s", 45.0),
        ("1.5d", 36 * HOUR),
        (" 7D ", 7 * DAY),
        ("0", None),
        ("forever", None),
        ("0d", None),
    ],
)
def test_parse_age_reads_what_format_age_writes(text: str, seconds: float | None) -> None:
    assert parse_age(text) == seconds
    assert parse_age(format_age(seconds)) == seconds


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (7 * DAY, "7d"),  # as the API note shows it
        (36 * HOUR, "36h"),
        (90 * MINUTE, "90m"),
        (HOUR, "1h"),
        (45.0, "45s"),
        (None, "forever"),
    ],
)
def test_format_age_writes_the_documented_forms(seconds: float | None, text: str) -> None:
    assert format_age(seconds) == text


@pytest.mark.parametrize(
    "text",
    ["-1d", "7 parsecs", "nan", "inf", "", "1e5s", "d", "7", "never", "7d-", "d7", "6000w", "1d 3"],
)
def test_parse_age_refuses_in_one_sentence(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_age(text)
    message = caught.value.message
    assert message.endswith(".") and "\n" not in message, message
    assert message[:-1].count(". ") == 0, message


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 101 * 365 * DAY])
def test_retention_windows_are_checked(bad: float) -> None:
    with pytest.raises(ConfigError):
        Retention().changed(dead_s=bad)
    assert Retention().changed(dead_s=None, log_s=HOUR) == Retention(dead_s=None, log_s=HOUR)


# -- 2: what a pass deletes, as a property -------------------------------------------------------

NOW = T0 + 90 * DAY
STATES = (QUEUED, LEASED, DELIVERED, DEAD)
WINDOWS = st.one_of(
    st.none(),
    st.integers(1, 45).map(lambda d: d * DAY),
    st.sampled_from([30 * MINUTE, HOUR]),
)


@dataclass(frozen=True)
class Population:
    retention: Retention
    notifications: list[tuple[int, NotificationState, float]]  # (key index, state, age_s)
    log_ages: list[float]
    audit_ages: list[float]


@st.composite
def populations(draw: st.DrawFn, max_rows: int = 24) -> Population:
    retention = Retention(draw(WINDOWS), draw(WINDOWS), draw(WINDOWS), draw(WINDOWS))
    # Ages up to 60 days back and some in the future, with every window's edge and a second
    # either side of it likely.
    edges = [w + d for w in retention.as_dict().values() if w is not None for d in (-1, 0, 1)]
    ages = st.one_of(
        st.integers(-2 * int(DAY), 60 * int(DAY)).map(float),
        st.sampled_from(edges or [0.0]),
    )
    rows = st.tuples(st.integers(0, 3), st.sampled_from(STATES), ages)
    return Population(
        retention,
        draw(st.lists(rows, max_size=max_rows)),
        draw(st.lists(ages, max_size=8)),
        draw(st.lists(ages, max_size=8)),
    )


def expired(window: float | None, age_s: float) -> bool:
    return window is not None and NOW - age_s < NOW - window


async def fill(store: Store, keys: Keys, world: Population) -> list[int]:
    """Replace every notification and log row with ``world``'s; returns the notification ids,
    in the order of ``world.notifications``."""
    for table in (notifications, delivery_log, audit_log):
        await run_sql(store, table.delete())
    made = [0] * len(world.notifications)
    for key, (tenant, provider) in enumerate(keys.pairs):
        mine = [n for n, row in enumerate(world.notifications) if row[0] == key]
        got = await enqueue(store, tenant, provider, [f"n{n}" for n in mine], now=NOW)
        for n, row_id in zip(mine, got, strict=True):
            made[n] = row_id
    await set_rows(
        store,
        [
            aged(i, state, NOW - age)
            for i, (_, state, age) in zip(made, world.notifications, strict=True)
        ],
    )
    log_rows = [
        {
            "notification_id": 1,
            "tenant_id": keys.tenants[0],
            "provider_id": keys.providers[0],
            "attempt": 1,
            "outcome": Outcome.DELIVERED.value,
            "worker": "w",
            "ts": NOW - age,
        }
        for age in world.log_ages
    ]
    audit_rows = [{"ts": NOW - age, "actor": ACTOR, "action": "x"} for age in world.audit_ages]
    if log_rows:
        await run_sql(store, delivery_log.insert(), log_rows)
    if audit_rows:
        await run_sql(store, audit_log.insert(), audit_rows)
    return made


async def check_prune(store: Store, keys: Keys, world: Population) -> None:
    store.maintenance.batch = 3  # several batches even for small populations
    made = await fill(store, keys, world)
    retention = world.retention
    window = {DELIVERED: retention.delivered_s, DEAD: retention.dead_s}
    gone = {
        i
        for i, (_, state, age) in zip(made, world.notifications, strict=True)
        if state in window and expired(window[state], age)
    }
    states = {i: state for i, (_, state, _) in zip(made, world.notifications, strict=True)}
    logs_before, audit_before = await ids(store, delivery_log), await ids(store, audit_log)
    log_gone = sum(expired(retention.log_s, age) for age in world.log_ages)
    audit_gone = sum(expired(retention.audit_s, age) for age in world.audit_ages)
    expected = PruneReport(
        delivered=sum(states[i] is DELIVERED for i in gone),
        dead=sum(states[i] is DEAD for i in gone),
        delivery_log=log_gone,
        audit_log=audit_gone,
    )

    dry = await store.maintenance.prune(retention, now=NOW, dry_run=True)
    assert dry == dataclasses.replace(expected, dry_run=True), world
    assert await ids(store, notifications) == set(made), "a dry run deleted something"
    report = await store.maintenance.prune(retention, now=NOW)
    assert report == expected, world

    kept = await ids(store, notifications)
    assert kept == set(made) - gone, world
    assert {i for i in made if states[i] in (QUEUED, LEASED)} <= kept, "an unfinished row went"
    assert len(logs_before - await ids(store, delivery_log)) == log_gone, world
    assert len(audit_before - await ids(store, audit_log)) == audit_gone, world
    # Exactly the old ones: every log and audit row left is inside its window.
    for table, limit in ((delivery_log, retention.log_s), (audit_log, retention.audit_s)):
        oldest = await _oldest(store, table)
        assert limit is None or oldest is None or oldest >= NOW - limit, (table.name, world)
    await counts_match(store)


async def _oldest(store: Store, table: sa.Table) -> float | None:
    async def tx(conn: AsyncConnection) -> float | None:
        value = (await conn.execute(sa.select(sa.func.min(table.c.ts)))).scalar()
        return None if value is None else float(value)

    return await store._db.read(tx)


PROPERTY = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@settings(PROPERTY, max_examples=25)
@given(world=populations())
async def test_prune_deletes_exactly_the_finished_rows_past_their_window(
    store: Store, keys: Keys, world: Population
) -> None:
    await check_prune(store, keys, world)


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
@settings(PROPERTY, max_examples=8)
@given(world=populations(max_rows=12))
async def test_prune_deletes_exactly_the_finished_rows_past_their_window_on_postgres(
    store: Store, keys: Keys, world: Population
) -> None:
    await check_prune(store, keys, world)


# -- 3: batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_at_call", "first_pass", "first_dead", "calls"),
    [
        (None, 50, 10, 8),  # 7 full batches of delivered rows, then 1 of dead ones
        (1, 7, 0, 1),  # stopped after the first batch: the dead rows wait too
        (3, 21, 0, 3),
    ],
)
async def test_prune_goes_batch_by_batch_and_resumes(
    store: Store,
    keys: Keys,
    stop_at_call: int | None,
    first_pass: int,
    first_dead: int,
    calls: int,
) -> None:
    tenant, provider = keys.pairs[0]
    store.maintenance.batch = 7
    delivered = await enqueue(store, tenant, provider, [f"d{n}" for n in range(50)])
    dead = await enqueue(store, tenant, provider, [f"x{n}" for n in range(10)])
    old = T0 - 40 * DAY
    await set_rows(store, [aged(i, DELIVERED, old) for i in delivered])
    await set_rows(store, [aged(i, DEAD, old) for i in dead])
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) == stop_at_call

    report = await store.maintenance.prune(Retention(), now=T0, should_stop=should_stop)
    assert (report.delivered, report.dead, report.complete) == (
        first_pass,
        first_dead,
        stop_at_call is None,
    )
    assert len(asked) == calls
    await counts_match(store)
    rest = await store.maintenance.prune(Retention(), now=T0)
    assert (rest.delivered, rest.dead, rest.complete) == (50 - first_pass, 10 - first_dead, True)
    assert await ids(store, notifications) == set()
    await counts_match(store)


# -- 4: a key is remembered as long as its notification ------------------------------------------


async def test_a_pruned_idempotency_key_can_be_used_again(store: Store, keys: Keys) -> None:
    tenant, provider = keys.pairs[0]
    [first] = await store.queue.enqueue(tenant, [new_notification(provider, "K")], now=T0)
    [leased] = await store.queue.claim(tenant, provider, 1, owner="w", lease_s=30, now=T0)
    done = Completion(leased, Outcome.DELIVERED, DELIVERED, ts=T0 + 1)
    assert await store.queue.complete([done], worker="w") == [True]
    window = Retention(delivered_s=HOUR, log_s=None)  # the delivery log is kept

    again = await store.queue.enqueue(tenant, [new_notification(provider, "K")], now=T0 + 2)
    assert again == [EnqueueResult(first.id, "K", duplicate=True)]
    edge = await store.maintenance.prune(window, now=T0 + 1 + HOUR)  # exactly its age: kept
    assert edge.delivered == 0
    assert await store.queue.enqueue(tenant, [new_notification(provider, "K")], now=T0 + 3) == again

    assert (await store.maintenance.prune(window, now=T0 + 2 * HOUR)).delivered == 1
    [fresh] = await store.queue.enqueue(
        tenant, [new_notification(provider, "K")], now=T0 + 2 * HOUR
    )
    assert not fresh.duplicate
    # A new notification, not the old one's id again: the kept delivery log names the old id.
    assert fresh.id != first.id, "a pruned notification's id was given to a new one"
    assert await store.notifications.deliveries(tenant, notification_id=fresh.id) == []
    await counts_match(store)


# -- 5: windows live in the store ----------------------------------------------------------------


async def test_retention_set_anywhere_reaches_running_engines_and_survives_restarts(
    store_url: str, box: SecretBox
) -> None:
    fast = EngineSettings(prune_s=0.2)
    async with Store(store_url, box) as store_a, Store(store_url, box) as store_b:
        await store_a.migrate()
        keys = await make_keys(store_a)
        tenant, provider = keys.pairs[0]
        engine_a = open_engine(store_a, SystemClock(), fast)  # runs, and prunes often
        engine_b = open_engine(store_b, SystemClock())  # another process: only configures
        await engine_a.open()
        await engine_b.open()
        try:
            now = time.time()
            old = await enqueue(store_a, tenant, provider, [f"old{n}" for n in range(5)])
            young = await enqueue(store_a, tenant, provider, [f"young{n}" for n in range(5)])
            await set_rows(store_a, [aged(i, DELIVERED, now - 2 * HOUR) for i in old])
            await set_rows(store_a, [aged(i, DELIVERED, now - 30 * MINUTE) for i in young])
            await engine_a.start()

            async def passed() -> bool:
                return await engine_b.pruned_at() is not None

            await eventually(passed, 15.0, "a background pass")
            assert await ids(store_a, notifications) == set(old) | set(young), "default: 7 days"

            assert await engine_b.retention_set(delivered_s=HOUR) == Retention(delivered_s=HOUR)

            async def pruned() -> bool:
                return await ids(store_b, notifications) == set(young)

            await eventually(pruned, 15.0, "engine A to apply B's window")
            assert engine_a.failure is None
            await counts_match(store_b)
        finally:
            await engine_a.close()
            await engine_b.close()

    async with Store(store_url, box) as store_c:
        engine_c = open_engine(store_c, SystemClock())
        await engine_c.open()
        try:
            assert await engine_c.retention() == Retention(delivered_s=HOUR)
            [entry, *_] = await store_c.audit.entries(limit=1)
            assert (entry.action, entry.actor) == ("retention.set", "engine")
            assert entry.detail == Retention(delivered_s=HOUR).as_dict()
        finally:
            await engine_c.close()


async def test_set_retention_refuses_unknown_windows_and_bad_ages(store: Store) -> None:
    engine = open_engine(store, FakeClock())
    await engine.open()
    try:
        for bad in ({"kept_s": HOUR}, {"dead_s": -1.0}, {"log_s": float("nan")}):
            with pytest.raises(ConfigError):
                await engine.retention_set(**bad)
        assert await engine.retention() == Retention()
        assert await engine.retention_set(audit_s=None) == Retention(audit_s=None)
        assert await engine.retention_set(dead_s=DAY) == Retention(dead_s=DAY, audit_s=None)
    finally:
        await engine.close()


# -- 6: one pruner at a time ---------------------------------------------------------------------

HOLD_S = 10.0
# (owner, now, wins, holder afterwards); each owner on its own Store, as two processes.
CHORE_STEPS = [
    ("a", T0, True, "a"),
    ("b", T0 + 1, False, "a"),
    ("a", T0 + 2, True, "a"),  # the holder takes it again: held until T0 + 12 now
    ("b", T0 + 11, False, "a"),
    ("b", T0 + 12, True, "b"),  # expired at exactly T0 + 12
    ("a", T0 + 12, False, "b"),
    ("a", T0 - 100, False, "b"),  # a clock far behind does not steal it either
    ("b", T0 + 13, True, "b"),
]


async def test_the_chore_lease_has_one_owner_at_a_time(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store_a, Store(store_url, box) as store_b:
        await store_a.migrate()
        repo = {"a": store_a.maintenance, "b": store_b.maintenance}
        for step, (owner, now, wins, holder) in enumerate(CHORE_STEPS):
            won = await repo[owner].try_chore("prune", owner, hold_s=HOLD_S, now=now)
            assert (won, await _holder(store_a, "prune")) == (wins, holder), step
        # A finished pass is recorded for every process to see, and leaves the lease alone.
        assert await repo["a"].chore_last_run("prune") is None
        await repo["b"].chore_done("prune", now=T0 + 21)
        assert await repo["a"].chore_last_run("prune") == T0 + 21
        assert await _holder(store_a, "prune") == "b"
        assert not await repo["a"].try_chore("prune", "a", hold_s=HOLD_S, now=T0 + 22)

        # Two owners asking at the same instant: exactly one wins, every time.
        for n in range(5):
            name = f"race-{n}"
            won_a, won_b = await asyncio.gather(
                repo["a"].try_chore(name, "a", hold_s=HOLD_S, now=T0),
                repo["b"].try_chore(name, "b", hold_s=HOLD_S, now=T0),
            )
            assert won_a != won_b, name
            assert await _holder(store_a, name) == ("a" if won_a else "b")


async def _holder(store: Store, name: str) -> str | None:
    async def tx(conn: AsyncConnection) -> str | None:
        query = sa.select(chore_leases.c.owner).where(chore_leases.c.name == name)
        owner = (await conn.execute(query)).scalar()
        return None if owner is None else str(owner)

    return await store._db.read(tx)


@pytest.mark.slow
async def test_running_engines_take_turns_at_pruning(
    store_url: str, box: SecretBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two engines on one store, both trying every 50 ms, on a clock that stands still: the
    lease taken first never expires, so every pass is one engine's. Once the clock moves past
    the lease, again one engine (whichever asks first) does every pass."""
    clock = FakeClock()
    fast = EngineSettings(prune_s=0.05)
    async with Store(store_url, box) as store_a, Store(store_url, box) as store_b:
        await store_a.migrate()
        engines = [open_engine(s, clock, fast) for s in (store_a, store_b)]
        wins: list[tuple[float, str]] = []  # (the instant asked at, the engine) per pass
        for engine in engines:
            _record_wins(engine, wins, monkeypatch)
            await engine.open()
        try:
            for engine in engines:
                await engine.start()
            for _ in range(3):
                now = clock.wall()

                async def several(now: float = now) -> bool:
                    return sum(at == now for at, _ in wins) >= 5

                await eventually(several, 15.0, "five passes")
                owners = {owner for at, owner in wins if at == now}
                assert len(owners) == 1, wins
                assert await _holder(store_a, "prune") in owners
                clock.advance(1.0)  # past the lease, which is held for prune_s
            assert all(e.failure is None for e in engines)
        finally:
            for engine in engines:
                await engine.close()


def _record_wins(
    engine: Engine, wins: list[tuple[float, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    maintenance = engine.store.maintenance
    try_chore = maintenance.try_chore

    async def recorded(name: str, owner: str, *, hold_s: float, now: float) -> bool:
        won = await try_chore(name, owner, hold_s=hold_s, now=now)
        if won:
            wins.append((now, owner))
        return won

    monkeypatch.setattr(maintenance, "try_chore", recorded)


# -- 7: the SQLite file ------------------------------------------------------------------------

CYCLES, PER_CYCLE = 5, 3_000
PAYLOAD = {"body": "x" * 500}


@pytest.mark.slow
async def test_the_sqlite_file_stops_growing_across_fill_and_prune_cycles(
    tmp_path: Path, box: SecretBox
) -> None:
    clock = FakeClock()
    async with Store(f"sqlite:///{tmp_path / 'omnipost.db'}", box) as store:
        await store.migrate()
        tenant, provider = (await make_keys(store)).pairs[0]
        engine = open_engine(store, clock)
        await engine.open()
        sizes: list[int] = []
        try:
            for cycle in range(CYCLES):
                names = [f"c{cycle}-{n}" for n in range(PER_CYCLE)]
                made = await enqueue(store, tenant, provider, names, payload=PAYLOAD)
                await set_rows(store, [aged(i, DELIVERED, clock.wall() - 8 * DAY) for i in made])
                report = await engine.prune()
                assert (report.delivered, report.complete) == (PER_CYCLE, True), cycle
                assert report.freed_bytes > 0, cycle
                size = await engine.store_size()
                assert (size.notifications, size.free_bytes) == (0, 0), cycle
                sizes.append(size.used_bytes)
        finally:
            await engine.close()
    assert sizes[-1] <= sizes[0] * 1.10, sizes


def _auto_vacuum(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        [(mode,)] = conn.execute("PRAGMA auto_vacuum")
    return int(mode)


async def test_a_new_sqlite_store_gives_pages_back(tmp_path: Path, box: SecretBox) -> None:
    path = tmp_path / "omnipost.db"
    async with Store(f"sqlite:///{path}", box) as store:
        await store.migrate()
    assert _auto_vacuum(path) == 2  # INCREMENTAL


async def test_migrate_converts_a_store_that_kept_its_free_pages(
    tmp_path: Path, box: SecretBox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engine")
    path = tmp_path / "omnipost.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA auto_vacuum=0")
        conn.execute("CREATE TABLE legacy (x TEXT)")
        conn.execute("INSERT INTO legacy VALUES ('kept')")
        conn.commit()
    assert _auto_vacuum(path) == 0
    for _ in range(2):
        async with Store(f"sqlite:///{path}", box) as store:
            await store.migrate()
    assert _auto_vacuum(path) == 2
    assert caplog.text.count("gives freed pages back") == 1, "converted once, then left alone"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert list(conn.execute("SELECT x FROM legacy")) == [("kept",)]
