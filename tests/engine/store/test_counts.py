"""The kept counts (``queue_counts``, maintained by triggers) against a full recount: after every
kind of transition the store makes, after a transaction that fails midway, and the query plans
that keep the hot paths bounded however much history a SQLite store holds.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from engine import NotFound, NotificationState, Outcome, Retention, SecretBox, Store
from engine.store import Completion, EnqueueResult, Leased
from engine.store.schema import notifications
from testkit.retention import HOUR, Keys, make_keys
from testkit.support import new_notification

T0 = 1_700_000_000.0
QUEUED = NotificationState.QUEUED
LEASED = NotificationState.LEASED
DELIVERED = NotificationState.DELIVERED
DEAD = NotificationState.DEAD
N = notifications


def done(leased: Leased, state: NotificationState, ts: float = T0 + 1) -> Completion:
    outcome = {DELIVERED: Outcome.DELIVERED, QUEUED: Outcome.TRANSIENT, DEAD: Outcome.PERMANENT}
    later = ts + 60 if state is QUEUED else None
    return Completion(leased, outcome[state], state, available_at=later, ts=ts)


async def totals(store: Store) -> tuple[int, int, int, int]:
    """(queued, leased, delivered, dead) over every tenant, from the kept counts."""
    per = dict.fromkeys(NotificationState, 0)
    for row in await store.notifications.depth():
        per[row.state] += row.count
    return per[QUEUED], per[LEASED], per[DELIVERED], per[DEAD]


# -- 8: every transition ------------------------------------------------------------------------


@dataclass
class World:
    store: Store
    keys: Keys
    leases: dict[str, list[Leased]] = field(default_factory=dict)

    @property
    def acme_sms(self) -> tuple[int, int]:
        return self.keys.pairs[0]

    @property
    def acme_mail(self) -> tuple[int, int]:
        return self.keys.pairs[1]

    @property
    def beta_sms(self) -> tuple[int, int]:
        return self.keys.pairs[2]

    async def enqueue(self, key: tuple[int, int], *names: str) -> list[EnqueueResult]:
        tenant, provider = key
        return await self.store.queue.enqueue(
            tenant, [new_notification(provider, k) for k in names], now=T0
        )

    async def claim(
        self, label: str, key: tuple[int, int], n: int, owner: str = "w1", now: float = T0
    ) -> None:
        leased = await self.store.queue.claim(*key, n, owner=owner, lease_s=5, now=now)
        assert len(leased) == n, label
        self.leases.setdefault(label, []).extend(leased)

    async def complete(self, *done_: Completion, applied: bool = True) -> None:
        assert await self.store.queue.complete(done_, worker="w") == [applied] * len(done_)


Step = Callable[[World], Awaitable[None]]


async def enqueue_fresh(w: World) -> None:
    await w.enqueue(w.acme_sms, *(f"a{n}" for n in range(6)))
    await w.enqueue(w.acme_mail, "m0", "m1", "m2")
    await w.enqueue(w.beta_sms, "b0", "b1")


async def enqueue_duplicates(w: World) -> None:
    results = await w.enqueue(w.acme_sms, "a0", "a1", "a6", "a6")
    assert [r.duplicate for r in results] == [True, True, False, True]


async def claim_two_keys(w: World) -> None:
    await w.claim("one", w.acme_sms, 4)
    await w.claim("one", w.beta_sms, 2)


async def deliver_across_keys(w: World) -> None:
    """One owner's deliveries of two tenants: one UPDATE statement across keys."""
    a0, a1, _, _, b0, _ = w.leases["one"]
    await w.complete(done(a0, DELIVERED), done(a1, DELIVERED), done(b0, DELIVERED))


async def retry_and_kill(w: World) -> None:
    _, _, a2, a3, _, _ = w.leases["one"]
    await w.complete(done(a2, QUEUED), done(a3, DEAD))


async def stale_completions(w: World) -> None:
    a0, a1, a2, _, _, _ = w.leases["one"]
    await w.complete(done(a0, DEAD), done(a1, QUEUED), done(a2, DELIVERED), applied=False)


async def release(w: World) -> None:
    *_, b1 = w.leases["one"]
    assert await w.store.queue.release("w1", [b1]) == 1


async def claim_short(w: World) -> None:
    await w.claim("two", w.acme_mail, 3, owner="w2")
    await w.claim("two", w.beta_sms, 1, owner="w2")


async def reap(w: World) -> None:
    """One UPDATE returning the leases of two tenants to the queue."""
    assert await w.store.queue.reap(T0 + 10) == 4


async def dead_retry(w: World) -> None:
    tenant, _ = w.acme_sms
    assert await w.store.notifications.dead_retry(tenant, None, now=T0 + 20) == 1


async def kill_two(w: World) -> None:
    await w.claim("three", w.beta_sms, 1, owner="w3", now=T0 + 20)  # reaped at T0 + 10
    await w.claim("three", w.acme_mail, 1, owner="w3", now=T0 + 20)
    await w.complete(*(done(item, DEAD) for item in w.leases["three"]))


async def dead_discard(w: World) -> None:
    tenant, _ = w.beta_sms
    first, _ = w.leases["three"]
    assert await w.store.notifications.dead_discard(tenant, [first.id]) == 1


async def prune(w: World) -> None:
    window = Retention(delivered_s=HOUR, dead_s=HOUR)
    report = await w.store.maintenance.prune(window, now=T0 + 2 * HOUR)
    assert (report.delivered, report.dead) == (3, 1)


# (step, then (queued, leased, delivered, dead) over both tenants)
STEPS: list[tuple[Step, tuple[int, int, int, int]]] = [
    (enqueue_fresh, (11, 0, 0, 0)),
    (enqueue_duplicates, (12, 0, 0, 0)),
    (claim_two_keys, (6, 6, 0, 0)),
    (deliver_across_keys, (6, 3, 3, 0)),
    (retry_and_kill, (7, 1, 3, 1)),
    (stale_completions, (7, 1, 3, 1)),
    (release, (8, 0, 3, 1)),
    (claim_short, (4, 4, 3, 1)),
    (reap, (8, 0, 3, 1)),
    (dead_retry, (9, 0, 3, 0)),
    (kill_two, (7, 0, 3, 2)),
    (dead_discard, (7, 0, 3, 1)),
    (prune, (7, 0, 0, 0)),
]


async def test_counts_equal_a_recount_after_every_transition(store: Store) -> None:
    world = World(store, await make_keys(store))
    for step, expected in STEPS:
        await step(world)
        assert await store.notifications.depth() == await store.notifications.recount(), (
            step.__name__
        )
        assert await totals(store) == expected, step.__name__
    size = await store.maintenance.size()
    assert size.notifications == sum(expected)


# -- 9: a transaction that fails midway -----------------------------------------------------------


class Boom(Exception):
    pass


async def test_counts_are_rolled_back_with_a_failed_transaction(store: Store) -> None:
    keys = await make_keys(store)
    tenant, provider = keys.pairs[0]
    await store.queue.enqueue(
        tenant, [new_notification(provider, f"k{n}") for n in range(10)], now=T0
    )
    before = await store.notifications.depth()

    # 1,500 good rows, then one naming a provider that does not exist: the rows go in more
    # than one INSERT statement, so the triggers have counted some before the failure.
    items = [new_notification(provider, f"many{n}") for n in range(1_500)] + [
        new_notification(9_999, "orphan")
    ]
    with pytest.raises(NotFound):
        await store.queue.enqueue(tenant, items, now=T0)
    assert await store.notifications.depth() == before == await store.notifications.recount()

    async def fails_after_a_change(conn: AsyncConnection) -> None:
        await conn.execute(N.update().where(N.c.state == QUEUED.value).values(state=DEAD.value))
        raise Boom

    with pytest.raises(Boom):
        await store._db.write(fails_after_a_change)
    assert await store.notifications.depth() == before == await store.notifications.recount()


# -- 10: query plans on a SQLite store with history ------------------------------------------------

HISTORY, BACKLOG = 50_000, 20_000
# A whole-table scan, or a sort (of every row a range matched: the claim once sorted the key's
# whole backlog through the due-rows index when SQLite had no statistics).
_SCANS = re.compile(r"\bSCAN (notifications|delivery_log)\b|TEMP B-TREE FOR ORDER BY")


def _fill(path: Path, box: SecretBox, tenant: int, provider: int, *, analyze: bool) -> None:
    """HISTORY delivered notifications (and a delivery log row each), a month old, and a
    BACKLOG of queued ones of one key; written directly, the way months of use would leave
    them, then (with ``analyze``) analysed."""
    token = box.encrypt("someone@example.com")  # one real token: claims decrypt it
    old = T0 - 30 * 86_400.0

    def row(n: int, state: str) -> tuple[Any, ...]:
        finished = old + n if state == "delivered" else None
        return (tenant, provider, token, "{}", f"k{n}", state, 1, 5, old, old, finished)

    rows = [row(n, "delivered") for n in range(HISTORY)]
    rows += [row(n, "queued") for n in range(HISTORY, HISTORY + BACKLOG)]
    log = [(n + 1, tenant, provider, 1, "delivered", "w", old + n) for n in range(HISTORY)]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executemany(
            "INSERT INTO notifications (tenant_id, provider_id, recipient, payload,"
            " idempotency_key, state, attempt, max_attempts, available_at, enqueued_at,"
            " finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt,"
            " outcome, worker, ts) VALUES (?, ?, ?, ?, ?, ?, ?)",
            log,
        )
        conn.commit()
        if analyze:
            conn.execute("ANALYZE")
            conn.execute("PRAGMA optimize")


@contextlib.contextmanager
def captured(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the store sends: SQL and parameters (an executemany's first row)."""
    seen: list[tuple[str, Any]] = []
    engine = store._db.engine.sync_engine

    def record(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        # A real executemany passes rows; "insertmanyvalues" passes one flat row.
        rows = many and params and isinstance(params[0], tuple | list)
        seen.append((statement, params[0] if rows else params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def _hot_paths(store: Store, tenant: int, provider: int) -> dict[str, list[tuple[str, Any]]]:
    statements: dict[str, list[tuple[str, Any]]] = {}

    async def run(name: str, call: Awaitable[Any]) -> Any:
        with captured(store) as seen:
            result = await call
        statements[name] = seen
        return result

    now = T0
    await run("due_pairs", store.queue.due_pairs(now))
    await run("depth", store.notifications.depth())
    await run(
        "enqueue",
        store.queue.enqueue(
            tenant, [new_notification(provider, "fresh"), new_notification(provider, "k1")], now=now
        ),
    )
    leased = await run(
        "claim", store.queue.claim(tenant, provider, 50, owner="w", lease_s=30, now=now)
    )
    assert len(leased) == 50
    await run("renew", store.queue.renew("w", lease_s=30, now=now))
    await run("reap", store.queue.reap(now))
    applied = await run(
        "complete", store.queue.complete([done(x, DELIVERED, now) for x in leased], worker="w")
    )
    assert all(applied)
    store.maintenance.batch = 100
    report = await run(
        "prune batch", store.maintenance.prune(Retention(), now=now, should_stop=lambda: True)
    )
    assert (report.delivered, report.complete) == (100, False)
    await run("prune count", store.maintenance.prune(Retention(), now=now, dry_run=True))
    await run("size", store.maintenance.size())
    return statements


@pytest.mark.slow
@pytest.mark.parametrize("analyze", [True, False], ids=["analysed", "no-statistics"])
async def test_hot_paths_stay_on_indexes(tmp_path: Path, box: SecretBox, analyze: bool) -> None:
    """With planner statistics (``ANALYZE``, ``PRAGMA optimize``) and without them (a new
    store), no hot statement scans a big table or sorts what a range matched."""
    path = tmp_path / "omnipost.db"
    url = f"sqlite:///{path}"
    async with Store(url, box) as store:
        await store.migrate()
        tenant, provider = (await make_keys(store)).pairs[0]
    _fill(path, box, tenant, provider, analyze=analyze)

    async with Store(url, box) as store:
        assert await store.notifications.depth() == await store.notifications.recount()
        statements = await _hot_paths(store, tenant, provider)

    scans: list[str] = []
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for name, seen in statements.items():
            for sql, params in seen:
                if not sql.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE")):
                    continue
                plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
                if any(_SCANS.search(line) for line in plan):
                    scans.append(f"{name}: {' '.join(sql.split())}\n    " + "\n    ".join(plan))
    assert not scans, "\n".join(scans)
