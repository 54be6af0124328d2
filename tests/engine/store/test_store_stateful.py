"""A Hypothesis state machine over the SQLite queue: random interleavings of enqueue, claim
(by three owners), renew, complete (with current and stale leases), expire (the ``now`` passed
in moves on), reap, release and dead-letter retry, checked step by step against a model.

Invariants: no notification is lost (every enqueued id is there, in exactly the state the
model says); a completion or release with a stale (owner, attempt) is refused and changes
nothing; a delivered notification is never claimed again; a leased row always has an owner
and an expiry, and no other row has either.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engine.core.crypto import SecretBox
from engine.core.domain import NotificationState, Outcome
from engine.store import Completion, Leased, NotificationRow, Store

T0 = 1_700_000_000.0
OWNERS = ("w1", "w2", "w3")
KEYS = tuple(f"k{n}" for n in range(10))
QUEUED, LEASED, DELIVERED, DEAD = (
    NotificationState.QUEUED,
    NotificationState.LEASED,
    NotificationState.DELIVERED,
    NotificationState.DEAD,
)


@dataclass(frozen=True)
class Row:
    """The model of one notification: what its row must hold."""

    provider: int  # index into the machine's providers
    priority: int
    state: NotificationState = QUEUED
    owner: str | None = None
    expires_at: float | None = None
    attempt: int = 0
    failures: int = 0
    available_at: float = T0


class QueueMachine(RuleBasedStateMachine):
    template: Path  # a migrated, empty store with one tenant and two providers

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="omnipost-stateful-"))
        self.db = self.dir / "omnipost.db"
        shutil.copy(self.template, self.db)
        self.loop = asyncio.new_event_loop()
        self.store = Store(f"sqlite:///{self.db}", SecretBox([TEMPLATE_KEY]))
        self.tenant = 1  # ids as the template made them
        self.providers = [1, 2]
        self.now = T0
        self.rows: dict[int, Row] = {}
        self.by_key: dict[str, int] = {}
        self.leases: list[Leased] = []  # every lease ever handed out, current or stale
        self.log_rows = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------

    def table(self) -> list[tuple[Any, ...]]:
        """Every notification row and the delivery log's length, read with the standard
        library (a second connection, as another process would see them)."""
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            rows = list(conn.execute("SELECT * FROM notifications ORDER BY id"))
            [(logged,)] = conn.execute("SELECT count(*) FROM delivery_log")
        return [*rows, ("log", logged)]

    def current(self, lease: Leased, owner: str | None = None) -> bool:
        """Whether ``lease`` still holds: same owner and attempt, and still leased."""
        row = self.rows[lease.id]
        return (
            row.state is LEASED
            and row.owner == (owner or lease.owner)
            and row.attempt == lease.attempt
        )

    def claimable(self, provider: int) -> list[int]:
        due = [
            i
            for i, r in self.rows.items()
            if r.state is QUEUED and r.provider == provider and r.available_at <= self.now
        ]
        return sorted(due, key=lambda i: (-self.rows[i].priority, i))

    # -- rules --------------------------------------------------------------------------------

    @rule(
        items=st.lists(
            st.tuples(st.sampled_from(KEYS), st.integers(0, 1), st.integers(0, 2)),
            min_size=1,
            max_size=4,
        )
    )
    def enqueue(self, items: list[tuple[str, int, int]]) -> None:
        new = [
            NotificationRow(self.providers[p], f"{key}@example.com", {"key": key}, key, priority)
            for key, p, priority in items
        ]
        results = self.run(self.store.queue.enqueue(self.tenant, new, now=self.now))
        assert [r.idempotency_key for r in results] == [key for key, _, _ in items]
        for result, (key, provider, priority) in zip(results, items, strict=True):
            if key in self.by_key:
                assert result.duplicate and result.id == self.by_key[key], result
                continue
            assert not result.duplicate and result.id not in self.rows, result
            self.by_key[key] = result.id
            self.rows[result.id] = Row(provider, priority, available_at=self.now)

    @rule(
        owner=st.sampled_from(OWNERS),
        provider=st.integers(0, 1),
        n=st.integers(1, 4),
        lease_s=st.sampled_from([1.0, 5.0, 10.0]),
    )
    def claim(self, owner: str, provider: int, n: int, lease_s: float) -> None:
        expected = self.claimable(provider)[:n]
        leased = self.run(
            self.store.queue.claim(
                self.tenant,
                self.providers[provider],
                n,
                owner=owner,
                lease_s=lease_s,
                now=self.now,
            )
        )
        assert [item.id for item in leased] == sorted(expected)
        for item in leased:
            row = self.rows[item.id]
            assert row.state is not DELIVERED, "a delivered notification was claimed again"
            assert item.attempt == row.attempt + 1, (item, row)
            assert item.owner == owner and item.lease_expires_at == self.now + lease_s
            self.rows[item.id] = replace(
                row, state=LEASED, owner=owner, expires_at=self.now + lease_s, attempt=item.attempt
            )
            self.leases.append(item)

    @rule(owner=st.sampled_from(OWNERS), lease_s=st.sampled_from([1.0, 5.0, 10.0]))
    def renew(self, owner: str, lease_s: float) -> None:
        held = [i for i, r in self.rows.items() if r.state is LEASED and r.owner == owner]
        renewed = self.run(self.store.queue.renew(owner, lease_s=lease_s, now=self.now))
        assert renewed == len(held)
        for i in held:
            self.rows[i] = replace(self.rows[i], expires_at=self.now + lease_s)

    @precondition(lambda self: self.leases)
    @rule(
        picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
        state=st.sampled_from([DELIVERED, QUEUED, DEAD]),
        delay_s=st.sampled_from([0.0, 1.0, 5.0]),
        spend=st.booleans(),
    )
    def complete(
        self, picks: list[int], state: NotificationState, delay_s: float, spend: bool
    ) -> None:
        chosen: dict[int, Leased] = {}
        for pick in picks:  # one completion per notification, as the dispatcher sends them
            lease = self.leases[pick % len(self.leases)]
            chosen.setdefault(lease.id, lease)
        outcome = {DELIVERED: Outcome.DELIVERED, QUEUED: Outcome.TRANSIENT, DEAD: Outcome.PERMANENT}
        completions = [
            Completion(
                lease,
                outcome[state],
                state,
                detail="d",
                available_at=self.now + delay_s,
                spend_attempt=spend,
                ts=self.now,
            )
            for lease in chosen.values()
        ]
        expected = [self.current(lease) for lease in chosen.values()]
        before = self.table()
        applied = self.run(self.store.queue.complete(completions, worker="machine"))
        assert applied == expected, "a completion's fate is decided by its lease alone"
        if not any(expected):
            assert self.table() == before, "a stale completion changed something"
        for lease, ok in zip(chosen.values(), applied, strict=True):
            if not ok:
                continue
            row = self.rows[lease.id]
            self.rows[lease.id] = replace(
                row,
                state=state,
                owner=None,
                expires_at=None,
                failures=row.failures + (spend and state is not DELIVERED),
                available_at=self.now + delay_s if state is QUEUED else row.available_at,
            )
            self.log_rows += 1

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 10_000), other_owner=st.booleans())
    def release(self, pick: int, other_owner: bool) -> None:
        lease = self.leases[pick % len(self.leases)]
        owner = next(o for o in OWNERS if o != lease.owner) if other_owner else lease.owner
        ok = self.current(lease, owner)
        before = self.table()
        assert self.run(self.store.queue.release(owner, [lease])) == int(ok)
        if not ok:
            assert self.table() == before, "a stale release changed something"
            return
        self.rows[lease.id] = replace(
            self.rows[lease.id], state=QUEUED, owner=None, expires_at=None
        )

    @rule(dt=st.sampled_from([0.5, 1.0, 5.0, 30.0]))
    def expire(self, dt: float) -> None:
        self.now += dt

    @rule()
    def reap(self) -> None:
        expired = [
            i
            for i, r in self.rows.items()
            if r.state is LEASED and r.expires_at is not None and r.expires_at < self.now
        ]
        assert self.run(self.store.queue.reap(self.now)) == len(expired)
        for i in expired:
            self.rows[i] = replace(
                self.rows[i], state=QUEUED, owner=None, expires_at=None, available_at=self.now
            )

    @rule()
    def dead_retry(self) -> None:
        dead = [i for i, r in self.rows.items() if r.state is DEAD]
        assert self.run(
            self.store.notifications.dead_retry(self.tenant, None, now=self.now)
        ) == len(dead)
        for i in dead:
            self.rows[i] = replace(self.rows[i], state=QUEUED, failures=0, available_at=self.now)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            conn.row_factory = sqlite3.Row
            stored = {r["id"]: r for r in conn.execute("SELECT * FROM notifications ORDER BY id")}
            [(logged,)] = conn.execute("SELECT count(*) FROM delivery_log")
        assert sorted(stored) == sorted(self.rows), "a notification was lost or appeared"
        assert logged == self.log_rows
        for i, row in self.rows.items():
            r = stored[i]
            assert r["state"] == row.state.value, (i, dict(r), row)
            leased = row.state is LEASED
            assert (r["lease_owner"] is not None) == leased, dict(r)
            assert (r["lease_expires_at"] is not None) == leased, dict(r)
            got = (r["lease_owner"], r["lease_expires_at"], r["attempt"], r["failures"])
            assert got == (row.owner, row.expires_at, row.attempt, row.failures), (dict(r), row)
            assert (r["available_at"], r["priority"]) == (row.available_at, row.priority)

    @invariant()
    def counts_match_a_recount(self) -> None:
        """The kept counts (``depth``) equal a full recount, and the model's."""
        kept = self.run(self.store.notifications.depth())
        assert kept == self.run(self.store.notifications.recount())
        model = {s: sum(r.state is s for r in self.rows.values()) for s in NotificationState}
        assert {row.state: row.count for row in kept} == {s: n for s, n in model.items() if n}


TEMPLATE_KEY = SecretBox.generate_key()


async def _make_template(db: Path) -> None:
    async with Store(f"sqlite:///{db}", SecretBox([TEMPLATE_KEY])) as store:
        await store.migrate()
        await store.config.tenant_add("acme", None, now=T0, actor="t")
        for name in ("sms", "mail"):
            await store.config.provider_add(name, "simulated", None, {}, {}, now=T0, actor="t")


@pytest.mark.slow
def test_the_queue_against_a_model(tmp_path: Path) -> None:
    template = tmp_path / "template.db"
    asyncio.run(_make_template(template))
    QueueMachine.template = template
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=30,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


async def test_one_batch_completes_the_leases_of_two_owners(tmp_path: Path) -> None:
    """The case the machine found: deliveries of two owners in one ``complete`` call were
    fenced on the first one's name, so the second's current leases were refused."""
    db = tmp_path / "omnipost.db"
    await _make_template(db)
    async with Store(f"sqlite:///{db}", SecretBox([TEMPLATE_KEY])) as store:
        items = [NotificationRow(1, "a@example.com", {}, key) for key in ("a", "b")]
        await store.queue.enqueue(1, items, now=T0)
        [first] = await store.queue.claim(1, 1, 1, owner="w1", lease_s=5, now=T0)
        [second] = await store.queue.claim(1, 1, 1, owner="w2", lease_s=5, now=T0)
        done = [Completion(x, Outcome.DELIVERED, DELIVERED, ts=T0) for x in (first, second)]
        assert await store.queue.complete(done, worker="w") == [True, True]
