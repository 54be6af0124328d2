"""Suppression lists, on both stores: a provider's "gone for good" puts the recipient on the
tenant's list for that provider (in the completion's own transaction), a later notification to it
is ``suppressed`` at enqueue and never sent, operators add and remove, the lists survive key
rotation, retention has a window for them, and nothing crosses tenants or providers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from engine import (
    ConfigError,
    Engine,
    EnqueueItem,
    FakeClock,
    NotFound,
    NotificationState,
    Retention,
    SecretBox,
    SendResult,
    Store,
)
from testkit.scripted import Script, setup, view
from testkit.support import new_notification
from testkit.virtual_time import VirtualEngines, until

GONE = SendResult.gone("HTTP 410 Unregistered")
S = NotificationState
T0 = 1_700_000_000.0
R0 = "user0@example.com"  # the recipient of the first notification of `setup`


async def _two_tenants(engine: Engine) -> None:
    """acme and beta, providers p and q (scripted)."""
    for tenant in ("acme", "beta"):
        await engine.tenant_add(tenant)
    for provider in ("p", "q"):
        await engine.provider_add(provider, "scripted")


async def test_a_recipient_the_provider_says_is_gone_is_suppressed_from_then_on(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    script.answers.append(GONE)
    [nid] = await setup(engine)
    await engine.start()

    async def dead() -> bool:
        return (await view(engine, nid)).state is S.DEAD

    await until(clock, dead, what="the gone send dead")
    [entry] = await engine.suppressions("acme")
    assert (entry.provider, entry.source, entry.notification_id) == ("p", "provider", nid)
    assert entry.reason == "HTTP 410 Unregistered"
    assert entry.recipient_masked != R0 and "user0" not in entry.recipient_masked
    await until(clock, lambda: engine.totals().gone == 1, what="the gone send counted")

    again = await engine.enqueue("acme", "p", R0, {"n": 1}, key="again")
    assert (again.suppressed, again.duplicate) == (True, False)
    row = await view(engine, again.id)
    assert row.state is S.SUPPRESSED
    assert row.finished_at is not None and "suppression list" in (row.last_error or "")
    other = await engine.enqueue("acme", "p", "r1", {"n": 2}, key="other")
    assert not other.suppressed

    async def other_sent() -> bool:
        return (await view(engine, other.id)).state is S.DELIVERED

    await until(clock, other_sent, what="the other recipient delivered")
    assert [c.message.idempotency_key for c in script.calls] == ["k0", "other"]  # never "again"
    assert engine.totals().suppressed == 1
    # A repeat of the suppressed one's key names it, as any duplicate does.
    repeat = await engine.enqueue("acme", "p", R0, {"n": 1}, key="again")
    assert (repeat.id, repeat.duplicate, repeat.suppressed) == (again.id, True, False)


async def test_a_gone_answer_records_the_recipient_once(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    """Two notifications to the same recipient both answered gone (both were queued before the
    first answer): one entry on the list."""
    engine = await engines.open()
    script.answers.extend([GONE, GONE])
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")
    ids = [(await engine.enqueue("acme", "p", "same", {}, key=f"k{i}")).id for i in range(2)]
    await engine.start()

    async def both_dead() -> bool:
        return all([(await view(engine, i)).state is S.DEAD for i in ids])

    await until(clock, both_dead, what="both dead")
    assert len(await engine.suppressions("acme")) == 1


async def test_a_permanent_failure_that_is_not_gone_suppresses_nothing(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    engine = await engines.open()
    script.answers.append(SendResult.permanent("HTTP 400 BadDeviceToken"))
    [nid] = await setup(engine)
    await engine.start()

    async def dead() -> bool:
        return (await view(engine, nid)).state is S.DEAD

    await until(clock, dead, what="dead")
    assert await engine.suppressions("acme") == []
    assert not (await engine.enqueue("acme", "p", R0, {}, key="next")).suppressed


async def test_operators_add_and_remove_per_tenant_and_provider(
    engines: VirtualEngines,
) -> None:
    engine = await engines.open()
    await _two_tenants(engine)
    assert await engine.suppression_add("acme", "p", ["a@x", "b@x", "a@x"], reason="imported") == 2
    assert await engine.suppression_add("acme", "p", ["a@x", "c@x"]) == 1
    listed = await engine.suppressions("acme")
    assert [(e.provider, e.source, e.reason) for e in listed] == [
        ("p", "operator", ""),
        ("p", "operator", "imported"),
        ("p", "operator", "imported"),
    ]
    results = await engine.enqueue_many(
        "acme",
        [
            EnqueueItem("p", "a@x", {}, "1", 0),  # suppressed
            EnqueueItem("q", "a@x", {}, "2", 0),  # another provider: sent
            EnqueueItem("p", "d@x", {}, "3", 0),  # not on the list
            EnqueueItem("p", "b@x", {}, "4", 0),  # suppressed
        ],
    )
    assert [r.suppressed for r in results] == [True, False, False, True]
    # Another tenant's notifications to the same recipients go out; its list is its own.
    assert not (await engine.enqueue("beta", "p", "a@x", {}, key="b1")).suppressed
    assert await engine.suppressions("beta") == []

    await engine.suppression_remove("acme", "p", "a@x")
    assert not (await engine.enqueue("acme", "p", "a@x", {}, key="5")).suppressed
    with pytest.raises(NotFound, match="not on the tenant's suppression list"):
        await engine.suppression_remove("acme", "p", "a@x")
    with pytest.raises(NotFound, match="not on the tenant's suppression list"):
        await engine.suppression_remove("beta", "p", "b@x")  # acme's entry, named by beta
    with pytest.raises(NotFound, match="no provider named"):
        await engine.suppression_add("acme", "nope", ["x"])
    with pytest.raises(ConfigError, match="recipient must not be empty"):
        await engine.suppression_add("acme", "p", ["ok", ""])
    with pytest.raises(ConfigError, match="one printable line"):
        await engine.suppression_add("acme", "p", ["ok"], reason="two\nlines")
    assert len(await engine.suppressions("acme")) == 2  # the refused calls added nothing
    # Paged newest first.
    first = await engine.suppressions("acme", limit=1)
    rest = await engine.suppressions("acme", limit=10, before=first[0].id)
    assert [e.id for e in first + rest] == [e.id for e in await engine.suppressions("acme")]
    assert await engine.suppressions("acme", provider="q") == []

    audit = await engine.audit_entries(limit=20)
    actions = [a.action for a in audit]
    assert actions.count("suppression.add") == 2 and actions.count("suppression.remove") == 1
    assert not any("a@x" in a.detail or "b@x" in a.detail for a in audit)


async def test_the_lists_hold_across_a_key_rotation(store_url: str, tmp_path: object) -> None:
    """Suppressed under key A; the keys become [B, A]: still suppressed (looked up under both);
    after the rotation under B alone."""
    old = SecretBox.generate_key()
    new = SecretBox.generate_key()
    async with Store(store_url, SecretBox([old])) as store:
        await store.migrate()
        engine = await _open(store)
        await engine.tenant_add("acme")
        await engine.provider_add("p", "file", options={"path": str(tmp_path) + "/out.jsonl"})
        await engine.suppression_add("acme", "p", ["a@x"])
        await engine.close()
    async with Store(store_url, SecretBox([new, old])) as store:
        engine = await _open(store)
        assert (await engine.enqueue("acme", "p", "a@x", {}, key="before")).suppressed
        report = await engine.keys_rotate()
        assert {t.table: t.rewritten for t in report.tables}["suppressions"] == 1
        await engine.close()
    async with Store(store_url, SecretBox([new])) as store:
        engine = await _open(store)
        assert (await engine.enqueue("acme", "p", "a@x", {}, key="after")).suppressed
        [entry] = await engine.suppressions("acme")
        assert entry.recipient_masked == "a***@***"  # read under the new key
        await engine.suppression_remove("acme", "p", "a@x")
        await engine.close()


async def test_what_was_queued_to_a_recipient_is_suppressed_with_it(
    engines: VirtualEngines, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's add suppresses the tenant's notifications for that provider already
    queued to the recipient (in any of its spellings), page after page; not those of another
    provider or tenant, nor one a worker has leased."""
    from engine.store import suppressions as store_suppressions
    from engine.store.suppressions import SUPPRESSED_DETAIL

    monkeypatch.setattr(store_suppressions, "_SWEEP_PAGE", 2)  # three pages and an empty one
    engine = await engines.open()
    await _two_tenants(engine)
    rows: list[EnqueueItem] = [
        EnqueueItem("p", "a@x", {}, "1", 0),
        EnqueueItem("p", "Ada <A@X>", {}, "2", 0),  # the same recipient, spelt otherwise
        EnqueueItem("q", "a@x", {}, "3", 0),  # another provider
        EnqueueItem("p", "b@x", {}, "4", 0),
        EnqueueItem("p", "a@x", {}, "5", 0),
        EnqueueItem("p", "a@x", {}, "6", 0),  # leased below
    ]
    made = await engine.enqueue_many("acme", rows)
    await engine.enqueue("beta", "p", "a@x", {}, key="b1")  # another tenant
    tenant = (await engine.store.config.tenant("acme")).id
    provider = (await engine.store.config.provider("p")).id
    leased = await engine.store.queue.claim(
        tenant, provider, 5, owner="w", lease_s=60, now=clock.wall()
    )
    back = [lease for lease in leased if lease.idempotency_key != "6"]  # "6" stays leased
    assert len(back) == 4
    await engine.store.queue.release("w", back)

    assert await engine.suppression_add_counts("acme", "p", ["A@X"], reason="asked") == (1, 3)
    views = {v.idempotency_key: v for v in await engine.notifications("acme")}
    assert {k: v.state for k, v in views.items()} == {
        "1": S.SUPPRESSED,
        "2": S.SUPPRESSED,
        "3": S.QUEUED,
        "4": S.QUEUED,
        "5": S.SUPPRESSED,
        "6": S.LEASED,
    }
    assert views["1"].last_error == SUPPRESSED_DETAIL and views["1"].finished_at is not None
    assert [v.state for v in await engine.notifications("beta")] == [S.QUEUED]
    assert await engine.suppression_add_counts("acme", "p", ["a@x"]) == (0, 0)  # nothing left
    counts = {(c.tenant_id, c.state): c.count for c in await engine.store.notifications.depth()}
    assert counts[(tenant, S.SUPPRESSED)] == 3
    audit = [a for a in await engine.audit_entries(limit=20) if a.action == "notification.suppress"]
    assert [a.detail for a in audit] == [{"provider": "p", "suppressed": 3}]
    assert {r.id for r in made} >= {v.id for v in views.values()}


async def _open(store: Store) -> Engine:
    from engine import BUILTIN_KINDS, LocalLimiter, SystemClock

    engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS)
    await engine.open()
    return engine


async def test_retention_forgets_old_entries_and_suppressed_notifications(
    engines: VirtualEngines, clock: FakeClock
) -> None:
    engine = await engines.open()
    await _two_tenants(engine)
    await engine.suppression_add("acme", "p", ["a@x"])
    suppressed = await engine.enqueue("acme", "p", "a@x", {}, key="s")
    await engine.retention_set(suppressions_s=3600.0, dead_s=7200.0)
    assert (await engine.prune(dry_run=True)).suppressions == 0
    clock.advance(3601.0)
    report = await engine.prune()
    assert (report.suppressions, report.suppressed) == (1, 0)
    assert await engine.suppressions("acme") == []
    clock.advance(3600.0)
    assert (await engine.prune()).suppressed == 1
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    assert await engine.store.notifications.get(tenant_id, suppressed.id) is None
    assert Retention().suppressions_s == 365 * 86400.0
    with pytest.raises(ConfigError, match="suppressed recipients"):
        Retention().changed(suppressions_s=-1.0)


async def test_a_key_repeated_in_a_batch_is_judged_by_its_first_item(
    engines: VirtualEngines,
) -> None:
    """The second item of a repeated key names the first one's notification: only the item that
    is inserted decides whether it is suppressed."""
    engine = await engines.open()
    await _two_tenants(engine)
    await engine.suppression_add("acme", "p", ["gone@x"])
    first, second = await engine.enqueue_many(
        "acme", [EnqueueItem("p", "ok@x", {}, "k", 0), EnqueueItem("p", "gone@x", {}, "k", 0)]
    )
    assert (first.suppressed, first.duplicate) == (False, False)
    assert (second.id, second.suppressed, second.duplicate) == (first.id, False, True)
    assert (await view(engine, first.id)).state is S.QUEUED
    third, fourth = await engine.enqueue_many(
        "acme", [EnqueueItem("p", "gone@x", {}, "j", 0), EnqueueItem("p", "ok@x", {}, "j", 0)]
    )
    assert (third.suppressed, fourth.id, fourth.suppressed) == (True, third.id, False)
    assert (await view(engine, third.id)).state is S.SUPPRESSED


async def test_a_list_holds_under_every_configured_key(store_url: str, tmp_path: object) -> None:
    """Suppressed under key A, then the keys are [C, B, A] before any rotation: still found."""
    a, b, c = (SecretBox.generate_key() for _ in range(3))
    async with Store(store_url, SecretBox([a])) as store:
        await store.migrate()
        engine = await _open(store)
        await engine.tenant_add("acme")
        await engine.provider_add("p", "file", options={"path": str(tmp_path) + "/out.jsonl"})
        await engine.suppression_add("acme", "p", ["a@x"])
        await engine.close()
    async with Store(store_url, SecretBox([c, b, a])) as store:
        engine = await _open(store)
        assert (await engine.enqueue("acme", "p", "a@x", {}, key="three")).suppressed
        assert await engine.suppression_add("acme", "p", ["a@x"]) == 0  # already on it, under A
        await engine.suppression_remove("acme", "p", "a@x")
        assert not (await engine.enqueue("acme", "p", "a@x", {}, key="gone")).suppressed
        await engine.close()


async def test_retrying_a_dead_letter_to_a_suppressed_recipient_sends_nothing(
    engines: VirtualEngines, script: Script, clock: FakeClock
) -> None:
    """A recipient that replied STOP stays unsent when its dead notification is retried: it
    goes to ``suppressed``, while the other dead letters are queued again."""
    engine = await engines.open()
    script.answers.extend([GONE, SendResult.permanent("HTTP 400 BadDeviceToken")])
    gone_id, other_id = await setup(engine, 2)
    await engine.start()

    async def both_dead() -> bool:
        return all([(await view(engine, i)).state is S.DEAD for i in (gone_id, other_id)])

    await until(clock, both_dead, what="both dead")
    # Only the other is queued again; the gone one is suppressed, and the audit says both.
    assert await engine.dead_retry_counts(None, tenant="acme") == (1, 1)
    [entry] = [e for e in await engine.audit_entries() if e.action == "dead.retry"]
    assert (entry.detail["count"], entry.detail["suppressed"]) == (1, 1)

    async def other_delivered() -> bool:
        return (await view(engine, other_id)).state is S.DELIVERED

    await until(clock, other_delivered, what="the other delivered")
    row = await view(engine, gone_id)
    assert row.state is S.SUPPRESSED and "suppression list" in (row.last_error or "")
    assert [c.message.notification_id for c in script.calls] == [gone_id, other_id, other_id]


@pytest.mark.parametrize(
    ("listed", "sent"),
    [
        ("BOB@Example.com", "bob@example.com"),
        ("Bob Smith <bob@example.com>", " Bob@EXAMPLE.com "),
        ("+1 (555) 123-4567", "+15551234567"),
        ("+44 20 7946 0958", "+442079460958"),
    ],
)
async def test_a_recipient_is_matched_in_its_usual_forms(
    engines: VirtualEngines, listed: str, sent: str
) -> None:
    """An address in any case or with a display name, a phone number with spaces and dashes:
    the same recipient. A device token is matched exactly."""
    engine = await engines.open()
    await _two_tenants(engine)
    await engine.suppression_add("acme", "p", [listed])
    assert (await engine.enqueue("acme", "p", sent, {}, key="k")).suppressed
    await engine.suppression_add("acme", "p", ["AbCdEf0123"])
    assert not (await engine.enqueue("acme", "p", "abcdef0123", {}, key="t")).suppressed


class _CountingBox(SecretBox):
    """A SecretBox that counts the recipients it makes suppression-list digests of."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.digested = 0

    def digest_columns(self, plaintexts: Sequence[str]) -> list[list[str]]:
        self.digested += len(plaintexts)
        return super().digest_columns(plaintexts)


@pytest.mark.parametrize("made_up", [False, True])
async def test_digests_are_made_only_once_a_tenant_keeps_a_list(
    store_url: str, made_up: bool
) -> None:
    """A tenant with no suppression list is enqueued without digests; a list another process
    starts is still honoured by the next enqueue (checked in the enqueue's own transaction),
    and from then on that tenant's rows are looked up with digests. (``made_up``: Postgres'
    statement without ON CONFLICT; SQLite's enqueue is one either way.)"""
    keys = [SecretBox.generate_key()]
    box = _CountingBox(keys)
    async with Store(store_url, box) as store, Store(store_url, SecretBox(keys)) as elsewhere:
        await store.migrate()
        tenant = (await store.config.tenant_add("acme", None, now=T0, actor="t")).id
        provider = (
            await store.config.provider_add("p", "simulated", None, {}, {}, now=T0, actor="t")
        ).id

        async def enqueue(*names: str) -> list[tuple[str, bool, bool]]:
            results = await store.queue.enqueue(
                tenant, [new_notification(provider, n) for n in names], now=T0, made_up=made_up
            )
            return [(r.idempotency_key, r.duplicate, r.suppressed) for r in results]

        assert await enqueue("a", "b") == [("a", False, False), ("b", False, False)]
        assert box.digested == 0
        await elsewhere.suppressions.add(
            tenant, provider, ["c@example.com"], reason="t", provider="p", now=T0, actor="t"
        )
        assert await enqueue("c", "d") == [("c", False, True), ("d", False, False)]
        assert box.digested == 2
        assert await enqueue("e") == [("e", False, False)]
        assert box.digested == 3
        states = {(r.tenant_id, r.state): r.count for r in await store.notifications.depth()}
        queued, suppressed = NotificationState.QUEUED, NotificationState.SUPPRESSED
        assert states == {(tenant, queued): 4, (tenant, suppressed): 1}
