"""The store contract: one suite, run on SQLite and on Postgres through the ``store`` fixture.

Each test drives one repository operation through a table of steps at fixed instants, so a
failing row names the step and the backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from engine.core.domain import Limit, NotificationState, Outcome
from engine.core.errors import ConfigError, Conflict, NotFound
from engine.store import (
    Completion,
    DepthRow,
    DuePair,
    Leased,
    NotificationRow,
    NotificationView,
    Store,
    WorkerRecord,
)
from engine.store.counts import DUE_CAP
from testkit.support import new_notification

T0 = 1_700_000_000.0
ACTOR = "test"
QUEUED = NotificationState.QUEUED
LEASED = NotificationState.LEASED
DELIVERED = NotificationState.DELIVERED
DEAD = NotificationState.DEAD


# -- helpers ---------------------------------------------------------------------------------


async def tenant_id(store: Store, name: str) -> int:
    return (await store.config.tenant_add(name, None, now=T0, actor=ACTOR)).id


async def provider_id(store: Store, name: str) -> int:
    record = await store.config.provider_add(name, "simulated", None, {}, {}, now=T0, actor=ACTOR)
    return record.id


async def enqueue_keys(store: Store, tenant: int, provider: int, *keys: str) -> dict[str, int]:
    results = await store.queue.enqueue(
        tenant, [new_notification(provider, k) for k in keys], now=T0
    )
    return {r.idempotency_key: r.id for r in results}


async def view(store: Store, tenant: int, notification_id: int) -> NotificationView:
    found = await store.notifications.get(tenant, notification_id)
    assert found is not None, f"notification {notification_id} is gone"
    return found


def done(
    leased: Leased,
    state: NotificationState,
    *,
    outcome: Outcome | None = None,
    ts: float = T0 + 1,
    available_at: float | None = None,
    spend_attempt: bool = False,
    detail: str = "",
) -> Completion:
    default = {DELIVERED: Outcome.DELIVERED, QUEUED: Outcome.TRANSIENT, DEAD: Outcome.PERMANENT}
    return Completion(
        leased=leased,
        outcome=outcome or default[state],
        state=state,
        detail=detail,
        available_at=available_at,
        spend_attempt=spend_attempt,
        ts=ts,
        latency_s=ts - leased.enqueued_at,
    )


async def make_dead(store: Store, tenant: int, provider: int, *keys: str) -> list[int]:
    """Enqueue ``keys`` and take each straight to dead through a permanent failure."""
    # Above any other priority, so that the claim below takes exactly these.
    items = [new_notification(provider, k, priority=1_000) for k in keys]
    await store.queue.enqueue(tenant, items, now=T0)
    leased = await store.queue.claim(
        tenant, provider, len(keys), owner="w-dead", lease_s=30, now=T0
    )
    applied = await store.queue.complete([done(item, DEAD) for item in leased], worker="w-dead")
    assert applied == [True] * len(keys)
    return [item.id for item in leased]


def keys_of(leased: Sequence[Leased]) -> list[str]:
    return sorted(item.idempotency_key for item in leased)


# -- tenants, providers, pair limits --------------------------------------------------------


async def test_tenants_add_update_list(store: Store) -> None:
    cfg = store.config
    acme = await cfg.tenant_add("acme", Limit(10, 20), now=T0, actor=ACTOR)
    beta = await cfg.tenant_add("beta", None, enabled=False, now=T0, actor=ACTOR)
    assert (acme.name, acme.limit, acme.enabled) == ("acme", Limit(10, 20), True)
    assert (beta.limit, beta.enabled) == (None, False)
    assert acme.id != beta.id

    steps: list[tuple[str, dict[str, Any], Limit | None, bool]] = [
        # (what, tenant_update kwargs, limit after, enabled after)
        ("nothing given changes nothing", {}, Limit(10, 20), True),
        ("new limit", {"limit": Limit(2.5, 5)}, Limit(2.5, 5), True),
        ("disable keeps the limit", {"enabled": False}, Limit(2.5, 5), False),
        ("None removes the limit", {"limit": None}, None, False),
        ("enable", {"enabled": True}, None, True),
        ("both at once", {"limit": Limit(1, 1), "enabled": False}, Limit(1, 1), False),
    ]
    for what, kwargs, limit, enabled in steps:
        updated = await cfg.tenant_update("acme", now=T0, actor=ACTOR, **kwargs)
        fetched = await cfg.tenant("acme")
        assert updated == fetched, what
        assert (fetched.id, fetched.limit, fetched.enabled) == (acme.id, limit, enabled), what

    assert [t.name for t in await cfg.tenants()] == ["acme", "beta"]
    assert await cfg.tenant("beta") == beta


async def test_config_errors_change_nothing(store: Store) -> None:
    cfg = store.config
    await cfg.tenant_add("acme", None, now=T0, actor=ACTOR)
    await cfg.provider_add("sms", "simulated", None, {}, {}, now=T0, actor=ACTOR)
    before = (await cfg.tenants(), await cfg.providers(), await cfg.pair_limits())
    audit_before = await store.audit.entries()
    calls: list[tuple[str, type[Exception], Callable[[], Awaitable[object]]]] = [
        (
            "add existing tenant",
            Conflict,
            lambda: cfg.tenant_add("acme", None, now=T0, actor=ACTOR),
        ),
        (
            "add existing provider",
            Conflict,
            lambda: cfg.provider_add("sms", "file", None, {}, {}, now=T0, actor=ACTOR),
        ),
        (
            "update missing tenant",
            NotFound,
            lambda: cfg.tenant_update("nope", enabled=False, now=T0, actor=ACTOR),
        ),
        ("get missing tenant", NotFound, lambda: cfg.tenant("nope")),
        (
            "update missing provider",
            NotFound,
            lambda: cfg.provider_update("nope", kind="x", now=T0, actor=ACTOR),
        ),
        ("get missing provider", NotFound, lambda: cfg.provider("nope")),
        (
            "pair limit of missing tenant",
            NotFound,
            lambda: cfg.pair_limit_set("nope", "sms", Limit(1, 1), now=T0, actor=ACTOR),
        ),
        (
            "pair limit of missing provider",
            NotFound,
            lambda: cfg.pair_limit_set("acme", "nope", Limit(1, 1), now=T0, actor=ACTOR),
        ),
        (
            "tenant with a bad name",
            ConfigError,
            lambda: cfg.tenant_add("a b", None, now=T0, actor=ACTOR),
        ),
        (
            "provider with a bad name",
            ConfigError,
            lambda: cfg.provider_add("-x", "file", None, {}, {}, now=T0, actor=ACTOR),
        ),
    ]
    for what, error, call in calls:
        with pytest.raises(error) as caught:
            await call()
        assert str(caught.value).endswith("."), f"{what}: errors are one sentence"
        after = (await cfg.tenants(), await cfg.providers(), await cfg.pair_limits())
        assert after == before, what
        assert await store.audit.entries() == audit_before, what


async def test_providers_options_and_secrets_merge(store: Store) -> None:
    cfg = store.config
    added = await cfg.provider_add(
        "hook",
        "webhook",
        Limit(5, 10),
        {"url": "https://a.example", "timeout_s": "3"},
        {"token": "t-1", "signing": "s-1"},
        now=T0,
        actor=ACTOR,
    )
    assert added.secret_names == ("signing", "token")
    assert added.secrets == {}, "a provider is handed out without secret values by default"

    steps: list[tuple[str, dict[str, Any], dict[str, str], dict[str, str], Limit | None]] = [
        # (what, provider_update kwargs, options after, secrets after, limit after)
        (
            "options merge",
            {"options": {"timeout_s": "5", "retries": "2"}},
            {"url": "https://a.example", "timeout_s": "5", "retries": "2"},
            {"token": "t-1", "signing": "s-1"},
            Limit(5, 10),
        ),
        (
            "'' removes an option",
            {"options": {"retries": "", "absent": ""}},
            {"url": "https://a.example", "timeout_s": "5"},
            {"token": "t-1", "signing": "s-1"},
            Limit(5, 10),
        ),
        (
            "secrets merge",
            {"secrets": {"token": "t-2", "extra": "e-1"}},
            {"url": "https://a.example", "timeout_s": "5"},
            {"token": "t-2", "signing": "s-1", "extra": "e-1"},
            Limit(5, 10),
        ),
        (
            "'' removes a secret",
            {"secrets": {"signing": "", "never-there": ""}},
            {"url": "https://a.example", "timeout_s": "5"},
            {"token": "t-2", "extra": "e-1"},
            Limit(5, 10),
        ),
        (
            "removing every secret",
            {"secrets": {"token": "", "extra": ""}},
            {"url": "https://a.example", "timeout_s": "5"},
            {},
            Limit(5, 10),
        ),
        (
            "limit removed, kind changed",
            {"limit": None, "kind": "file"},
            {"url": "https://a.example", "timeout_s": "5"},
            {},
            None,
        ),
        (
            "secrets added again",
            {"secrets": {"token": "t-3"}, "limit": Limit(1, 2)},
            {"url": "https://a.example", "timeout_s": "5"},
            {"token": "t-3"},
            Limit(1, 2),
        ),
    ]
    for what, kwargs, options, secrets, limit in steps:
        updated = await cfg.provider_update("hook", now=T0, actor=ACTOR, **kwargs)
        full = await cfg.provider("hook", with_secrets=True)
        assert updated.secrets == {}, what
        assert full.options == options, what
        assert full.secrets == secrets, what
        assert full.secret_names == tuple(sorted(secrets)), what
        assert updated.secret_names == full.secret_names, what
        assert full.limit == limit, what
    assert (await cfg.provider("hook")).kind == "file"

    await cfg.provider_add("another", "simulated", None, {}, {"k": "v"}, now=T0, actor=ACTOR)
    listed = await cfg.providers()
    assert [p.name for p in listed] == ["another", "hook"]
    assert all(p.secrets == {} for p in listed)
    assert [p.secrets for p in await cfg.providers(with_secrets=True)] == [
        {"k": "v"},
        {"token": "t-3"},
    ]


async def test_pair_limits_set_replace_remove(store: Store) -> None:
    cfg = store.config
    acme = await tenant_id(store, "acme")
    beta = await tenant_id(store, "beta")
    sms = await provider_id(store, "sms")
    mail = await provider_id(store, "mail")
    steps: list[tuple[str, str, Limit | None, list[tuple[str, str, int, int, Limit]]]] = [
        # (tenant, provider, limit to set, every pair limit after, sorted by tenant, provider)
        ("beta", "sms", Limit(1, 2), [("beta", "sms", beta, sms, Limit(1, 2))]),
        (
            "acme",
            "sms",
            Limit(3, 4),
            [("acme", "sms", acme, sms, Limit(3, 4)), ("beta", "sms", beta, sms, Limit(1, 2))],
        ),
        (
            "acme",
            "sms",
            Limit(5, 6),
            [("acme", "sms", acme, sms, Limit(5, 6)), ("beta", "sms", beta, sms, Limit(1, 2))],
        ),
        (
            "acme",
            "mail",
            Limit(7, 8),
            [
                ("acme", "mail", acme, mail, Limit(7, 8)),
                ("acme", "sms", acme, sms, Limit(5, 6)),
                ("beta", "sms", beta, sms, Limit(1, 2)),
            ],
        ),
        (
            "acme",
            "sms",
            None,
            [("acme", "mail", acme, mail, Limit(7, 8)), ("beta", "sms", beta, sms, Limit(1, 2))],
        ),
        (
            "acme",
            "sms",
            None,  # removing what is not there is fine
            [("acme", "mail", acme, mail, Limit(7, 8)), ("beta", "sms", beta, sms, Limit(1, 2))],
        ),
    ]
    for tenant, provider, limit, expected in steps:
        await cfg.pair_limit_set(tenant, provider, limit, now=T0, actor=ACTOR)
        got = [
            (p.tenant, p.provider, p.tenant_id, p.provider_id, p.limit)
            for p in await cfg.pair_limits()
        ]
        assert got == expected, (tenant, provider, limit)


async def test_config_changes_are_audited_without_secret_values(store: Store) -> None:
    cfg = store.config
    await cfg.tenant_add("acme", Limit(1, 2), now=T0, actor="alice")
    await cfg.tenant_update("acme", enabled=False, now=T0 + 1, actor="bob")
    await cfg.tenant_update("acme", now=T0 + 1.5, actor="bob")  # no change: no entry
    await cfg.provider_add(
        "sms", "simulated", None, {}, {"token": "tok-VALUE"}, now=T0 + 2, actor="carol"
    )
    await cfg.provider_update("sms", secrets={"token": "tok-NEW"}, now=T0 + 3, actor="carol")
    await cfg.pair_limit_set("acme", "sms", Limit(3, 4), now=T0 + 4, actor="dave")
    await store.audit.write("erin", "dead.retry", None, {"count": 2}, now=T0 + 5)
    acme = (await cfg.tenant("acme")).id

    entries = await store.audit.entries()
    got = [(e.ts, e.actor, e.action, e.tenant_id) for e in entries]
    assert got == [
        (T0 + 5, "erin", "dead.retry", None),
        (T0 + 4, "dave", "limit.set", acme),
        (T0 + 3, "carol", "provider.set", None),
        (T0 + 2, "carol", "provider.add", None),
        (T0 + 1, "bob", "tenant.set", acme),
        (T0, "alice", "tenant.add", acme),
    ]
    by_action = {e.action: e.detail for e in entries}
    assert by_action["tenant.add"]["limit"] == {"rate_per_s": 1, "burst": 2}
    assert by_action["tenant.set"]["enabled"] is False
    assert by_action["provider.add"]["secrets"] == ["token"]
    assert by_action["limit.set"] == {
        "tenant": "acme",
        "provider": "sms",
        "limit": {"rate_per_s": 3, "burst": 4},
    }
    assert by_action["dead.retry"] == {"count": 2}
    assert "tok-" not in repr(entries), "secret values never reach the audit log"
    assert [e.action for e in await store.audit.entries(limit=2)] == ["dead.retry", "limit.set"]


# -- enqueue ---------------------------------------------------------------------------------


async def test_enqueue_is_idempotent_within_and_across_calls(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    calls: list[tuple[list[str], list[tuple[str, bool, str | None]]]] = [
        # (keys of one call, per item: (key, duplicate, same id as the result of key ...))
        (["a", "b", "a"], [("a", False, None), ("b", False, None), ("a", True, "a")]),
        (
            ["c", "b", "a", "c"],
            [("c", False, None), ("b", True, "b"), ("a", True, "a"), ("c", True, "c")],
        ),
        ([], []),
    ]
    ids: dict[str, int] = {}
    for keys, expected in calls:
        results = await store.queue.enqueue(t, [new_notification(p, k) for k in keys], now=T0)
        assert [(r.idempotency_key, r.duplicate) for r in results] == [
            (k, d) for k, d, _ in expected
        ]
        for result, (key, _, same_as) in zip(results, expected, strict=True):
            if same_as is None:
                assert key not in ids, f"{key} got a second fresh id"
                ids[key] = result.id
            else:
                assert result.id == ids[same_as], f"duplicate {key} names another id"
    views = await store.notifications.list_by_tenant(t)
    assert sorted((v.idempotency_key, v.id) for v in views) == sorted(ids.items())
    assert all(v.state is QUEUED and v.attempt == 0 for v in views)


async def test_enqueue_duplicate_keeps_the_first_content(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    [first] = await store.queue.enqueue(t, [new_notification(p, "k", priority=1)], now=T0)
    changed = dataclasses.replace(new_notification(p, "k", priority=9), payload={"other": True})
    [again] = await store.queue.enqueue(t, [changed], now=T0 + 5)
    assert (again.id, again.duplicate) == (first.id, True)
    stored = await view(store, t, first.id)
    assert (stored.payload, stored.priority, stored.enqueued_at) == ({"key": "k"}, 1, T0)


async def test_enqueue_over_many_chunks_keeps_order(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    keys = [f"k{i % 700}" for i in range(1_200)]  # repeats span the store's insert chunks
    results = await store.queue.enqueue(t, [new_notification(p, k) for k in keys], now=T0)
    assert [r.idempotency_key for r in results] == keys
    assert [r.duplicate for r in results] == [i >= 700 for i in range(1_200)]
    assert all(results[i].id == results[i - 700].id for i in range(700, 1_200))
    assert len({r.id for r in results}) == 700
    [depth] = await store.notifications.depth()
    assert (depth.state, depth.count) == (QUEUED, 700)


async def test_enqueue_stores_what_was_given(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    item = NotificationRow(p, "+15551234567", {"text": "hi", "n": [1, 2]}, "key-1", 3, 7, T0 + 9)
    [result] = await store.queue.enqueue(t, [item], now=T0)
    got = await view(store, t, result.id)
    assert got == NotificationView(
        id=result.id,
        tenant_id=t,
        provider_id=p,
        recipient_masked="+1********67",
        payload={"text": "hi", "n": [1, 2]},
        idempotency_key="key-1",
        priority=3,
        state=QUEUED,
        attempt=0,
        failures=0,
        max_attempts=7,
        available_at=T0 + 9,
        enqueued_at=T0,
        finished_at=None,
        last_error=None,
    )


async def test_enqueue_for_a_missing_tenant_or_provider_is_not_found(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    missing: list[tuple[str, int, int]] = [("provider", t, p + 100), ("tenant", t + 100, p)]
    for what, tenant, provider in missing:
        with pytest.raises(NotFound, match="does not exist"):
            await store.queue.enqueue(
                tenant, [new_notification(p, "ok"), new_notification(provider, "bad")], now=T0
            )
        assert await store.notifications.depth() == [], f"{what}: all or nothing"


# -- claim, renew, release, reap -------------------------------------------------------------


async def test_claim_order_due_time_limit_and_key(store: Store) -> None:
    t = await tenant_id(store, "acme")
    other_t = await tenant_id(store, "beta")
    p = await provider_id(store, "sms")
    other_p = await provider_id(store, "mail")
    items = [
        new_notification(p, "p0-a"),
        new_notification(p, "p5", priority=5),
        new_notification(p, "p0-b"),
        new_notification(p, "p1", priority=1),
        new_notification(p, "later-p9", priority=9, available_at=T0 + 60),
        new_notification(p, "p-neg", priority=-1),
        new_notification(other_p, "mail-p9", priority=9),
    ]
    await store.queue.enqueue(t, items, now=T0)
    await store.queue.enqueue(other_t, [new_notification(p, "beta-p9", priority=9)], now=T0)

    steps: list[tuple[float, int, list[str]]] = [
        # (now, n, keys leased): priority first, then id; never what is not yet due
        (T0, 2, ["p1", "p5"]),
        (T0, 1, ["p0-a"]),
        (T0, 0, []),
        (T0, 10, ["p-neg", "p0-b"]),
        (T0 + 59.9, 10, []),
        (T0 + 60, 10, ["later-p9"]),
        (T0 + 60, 10, []),
    ]
    for now, n, expected in steps:
        leased = await store.queue.claim(t, p, n, owner="w1", lease_s=30, now=now)
        assert keys_of(leased) == expected, (now, n)
        for item in leased:
            assert (item.owner, item.lease_expires_at, item.attempt) == ("w1", now + 30, 1)
            assert (item.tenant_id, item.provider_id) == (t, p)
            assert item.recipient == f"{item.idempotency_key}@example.com"
            assert item.payload == {"key": item.idempotency_key}
            assert (item.failures, item.max_attempts, item.enqueued_at) == (0, 5, T0)
            assert (await view(store, t, item.id)).state is LEASED

    untouched = [v for v in await store.notifications.list_by_tenant(t) if v.provider_id == other_p]
    untouched += await store.notifications.list_by_tenant(other_t)
    assert [(v.idempotency_key, v.state) for v in untouched] == [
        ("mail-p9", QUEUED),
        ("beta-p9", QUEUED),
    ]


async def test_claim_bumps_attempt_on_every_lease(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    ids = await enqueue_keys(store, t, p, "k")
    for attempt in (1, 2, 3):
        [item] = await store.queue.claim(t, p, 5, owner=f"w{attempt}", lease_s=10, now=T0)
        assert (item.id, item.attempt, item.owner) == (ids["k"], attempt, f"w{attempt}")
        assert await store.queue.release(item.owner, [item]) == 1
        got = await view(store, t, item.id)
        assert (got.state, got.attempt, got.failures) == (QUEUED, attempt, 0)


async def test_renew_extends_only_the_owners_leases(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    await enqueue_keys(store, t, p, "a", "b", "c", "d")
    mine = await store.queue.claim(t, p, 2, owner="w1", lease_s=10, now=T0)
    theirs = await store.queue.claim(t, p, 1, owner="w2", lease_s=10, now=T0)
    [finished, kept] = mine
    assert await store.queue.complete([done(finished, DELIVERED)], worker="w1") == [True]

    steps: list[tuple[str, str, float, float, int]] = [
        # (what, call, now, lease_s, returned count or rows reaped)
        ("w1 renews the lease it still holds", "renew w1", T0 + 5, 30, 1),
        ("nobody else's lease moves", "renew nobody", T0 + 5, 30, 0),
        ("w2's lease expired at T0+10", "reap", T0 + 11, 0, 1),
        ("w1's lease holds until T0+35", "reap", T0 + 34, 0, 0),
        ("w1 renews again", "renew w1", T0 + 34, 30, 1),
        ("still held at T0+63", "reap", T0 + 63, 0, 0),
        ("expired at T0+64", "reap", T0 + 64.5, 0, 1),
        ("w1 holds nothing now", "renew w1", T0 + 65, 30, 0),
    ]
    for what, call, now, lease_s, count in steps:
        if call == "reap":
            assert await store.queue.reap(now) == count, what
        else:
            owner = call.split()[1]
            assert await store.queue.renew(owner, lease_s=lease_s, now=now) == count, what
    assert (await view(store, t, kept.id)).state is QUEUED
    assert (await view(store, t, theirs[0].id)).state is QUEUED
    assert (await view(store, t, finished.id)).state is DELIVERED


async def test_reap_returns_only_expired_leases(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    ids = await enqueue_keys(store, t, p, "short", "long", "queued")
    [short] = await store.queue.claim(t, p, 1, owner="w1", lease_s=10, now=T0)
    [long] = await store.queue.claim(t, p, 1, owner="w2", lease_s=100, now=T0)
    assert (short.id, long.id) == (ids["short"], ids["long"])

    steps: list[tuple[float, int, dict[str, NotificationState]]] = [
        # (now, reaped, state of each key after)
        (T0 + 9, 0, {"short": LEASED, "long": LEASED, "queued": QUEUED}),
        (T0 + 10, 0, {"short": LEASED, "long": LEASED, "queued": QUEUED}),  # expires_at is kept
        (T0 + 10.5, 1, {"short": QUEUED, "long": LEASED, "queued": QUEUED}),
        (T0 + 50, 0, {"short": QUEUED, "long": LEASED, "queued": QUEUED}),
        (T0 + 101, 1, {"short": QUEUED, "long": QUEUED, "queued": QUEUED}),
    ]
    for now, reaped, states in steps:
        assert await store.queue.reap(now) == reaped, now
        got = {k: (await view(store, t, i)).state for k, i in ids.items()}
        assert got == states, now

    reaped_view = await view(store, t, short.id)
    assert (reaped_view.failures, reaped_view.attempt) == (0, 1), "a takeover spends no attempt"
    assert reaped_view.available_at <= T0 + 10.5, "a reaped notification is due at once"
    [again] = await store.queue.claim(t, p, 1, owner="w3", lease_s=10, now=T0 + 200)
    assert again.attempt == 2


async def test_release_requeues_without_spending_an_attempt(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    await enqueue_keys(store, t, p, "a", "b")
    leased = await store.queue.claim(t, p, 2, owner="w1", lease_s=10, now=T0)
    assert await store.queue.release("w2", leased) == 0, "only the owner can release"
    assert await store.queue.release("w1", []) == 0
    stale = dataclasses.replace(leased[0], attempt=0)
    assert await store.queue.release("w1", [stale]) == 0, "release is fenced on attempt too"
    assert await store.queue.release("w1", leased) == 2
    assert await store.queue.release("w1", leased) == 0, "a second release changes nothing"
    for item in leased:
        got = await view(store, t, item.id)
        assert (got.state, got.failures, got.attempt, got.available_at) == (QUEUED, 0, 1, T0)
    assert await store.queue.reap(T0 + 1000) == 0


async def test_release_of_many_is_fenced_lease_by_lease(store: Store) -> None:
    """1,203 leases (more than one grouped statement's worth), three of them stale by attempt:
    every other one goes back, the stale ones stay as they are."""
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    await enqueue_keys(store, t, p, *(f"k{i}" for i in range(1_203)))
    leased = await store.queue.claim(t, p, 1_203, owner="w1", lease_s=10, now=T0)
    assert len(leased) == 1_203
    stale_at = (0, 500, 1_202)  # the first, one at a chunk's edge, the last
    given = [
        dataclasses.replace(item, attempt=0) if i in stale_at else item
        for i, item in enumerate(leased)
    ]
    assert await store.queue.release("w1", given[::-1]) == 1_200  # any order
    states = {v.id: v.state for v in await store.notifications.list_by_tenant(t, limit=2_000)}
    assert [i for i, item in enumerate(leased) if states[item.id] is LEASED] == list(stale_at)
    assert sum(state is QUEUED for state in states.values()) == 1_200


# -- completions -----------------------------------------------------------------------------


async def test_complete_is_fenced_on_owner_and_attempt(store: Store) -> None:
    """A lease taken over (reaped, then claimed again) can no longer be completed with the old
    (owner, attempt); only the current pair can, on the batch path and the one-by-one path."""
    t = await tenant_id(store, "acme")
    for path in (DELIVERED, QUEUED, DEAD):
        p = await provider_id(store, f"p-{path}")
        [n_id] = (await enqueue_keys(store, t, p, f"k-{path}")).values()
        [old] = await store.queue.claim(t, p, 1, owner="w1", lease_s=10, now=T0)
        assert await store.queue.reap(T0 + 11) == 1
        [current] = await store.queue.claim(t, p, 1, owner="w2", lease_s=10, now=T0 + 11)
        assert (old.id, current.id, current.attempt) == (n_id, n_id, 2)
        stale_variants = {
            "old owner, old attempt": old,
            "old owner, current attempt": dataclasses.replace(current, owner="w1"),
            "current owner, old attempt": dataclasses.replace(current, attempt=1),
        }
        for what, stale in stale_variants.items():
            applied = await store.queue.complete(
                [done(stale, path, available_at=T0 + 99)], worker=stale.owner
            )
            assert applied == [False], f"{path}: {what}"
            got = await view(store, t, n_id)
            assert (got.state, got.attempt, got.failures) == (LEASED, 2, 0), f"{path}: {what}"
            assert got.last_error is None, f"{path}: {what}"
            assert await store.notifications.deliveries(t, notification_id=n_id) == [], (
                f"{path}: {what}"
            )

        assert await store.queue.complete([done(current, path)], worker="w2") == [True], path
        assert (await view(store, t, n_id)).state is path
        [entry] = await store.notifications.deliveries(t, notification_id=n_id)
        assert (entry.attempt, entry.worker) == (2, "w2"), path
        again = await store.queue.complete([done(current, path)], worker="w2")
        assert again == [False], f"{path}: a completion applies once"
        assert len(await store.notifications.deliveries(t, notification_id=n_id)) == 1, path


async def test_a_large_delivered_batch_applies_only_the_leases_that_hold(store: Store) -> None:
    """One batch of 1,203 deliveries (more than one grouped statement's worth) in which three
    leases no longer hold: exactly the other 1,200 are delivered, each with one delivery-log
    row carrying its own attempt, time, latency and provider time; the three stay leased."""
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    count = 1_203
    await store.queue.enqueue(t, [new_notification(p, f"k{i}") for i in range(count)], now=T0)
    leased = await store.queue.claim(t, p, count, owner="w1", lease_s=30, now=T0)
    assert len(leased) == count
    stale = {leased[0].id, leased[600].id, leased[-1].id}
    batch = []
    for i, item in enumerate(leased):
        sent = item if item.id not in stale else dataclasses.replace(item, attempt=7)
        c = done(sent, DELIVERED, ts=T0 + 1 + i / 1000, detail="ok " * 300)
        batch.append(dataclasses.replace(c, send_s=i / 10_000))
    applied = await store.queue.complete(batch[::-1], worker="w1")
    assert applied == [c.leased.id not in stale for c in batch[::-1]]
    for n_id in stale:
        got = await view(store, t, n_id)
        assert (got.state, got.attempt) == (LEASED, 1)
    got = await view(store, t, leased[1].id)
    assert got.state is DELIVERED
    assert got.finished_at == pytest.approx(T0 + 1 + (count - 2) / 1000)
    log = await store.notifications.deliveries(t, limit=2 * count)
    assert len(log) == count - len(stale)
    assert {e.notification_id for e in log} == {item.id for item in leased} - stale
    entry = next(e for e in log if e.notification_id == leased[5].id)
    assert (entry.attempt, entry.worker, entry.outcome) == (1, "w1", Outcome.DELIVERED)
    assert entry.send_s == pytest.approx(5 / 10_000)
    assert entry.ts == pytest.approx(T0 + 1 + 5 / 1000)
    assert len(entry.detail) == 500


async def test_complete_a_reaped_but_unclaimed_lease_is_refused(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    await enqueue_keys(store, t, p, "k")
    [item] = await store.queue.claim(t, p, 1, owner="w1", lease_s=10, now=T0)
    assert await store.queue.reap(T0 + 11) == 1
    assert await store.queue.complete([done(item, DELIVERED)], worker="w1") == [False]
    assert (await view(store, t, item.id)).state is QUEUED
    assert await store.notifications.deliveries(t) == []


async def test_complete_writes_each_outcome(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    ids = await enqueue_keys(store, t, p, "ok", "retry", "throttled", "dead", "gone")
    leased = {
        i.idempotency_key: i
        for i in await store.queue.claim(t, p, 5, owner="w1", lease_s=30, now=T0)
    }
    stale = dataclasses.replace(leased["gone"], attempt=7)
    batch = [
        done(leased["ok"], DELIVERED, ts=T0 + 2),
        done(leased["retry"], QUEUED, available_at=T0 + 30, spend_attempt=True, detail="HTTP 503"),
        done(
            leased["throttled"],
            QUEUED,
            outcome=Outcome.THROTTLED,
            available_at=T0 + 5,
            detail="429",
        ),
        done(stale, DELIVERED, ts=T0 + 2),
        done(leased["dead"], DEAD, ts=T0 + 3, detail="bad recipient"),
    ]
    applied = await store.queue.complete(batch, worker="w1")
    assert applied == [True, True, True, False, True], "results follow the batch's order"

    expected: dict[str, tuple[NotificationState, int, float, float | None, str | None]] = {
        # key: (state, failures, available_at, finished_at, last_error)
        "ok": (DELIVERED, 0, T0, T0 + 2, None),
        "retry": (QUEUED, 1, T0 + 30, None, "HTTP 503"),
        "throttled": (QUEUED, 0, T0 + 5, None, "429"),
        "dead": (DEAD, 0, T0, T0 + 3, "bad recipient"),
        "gone": (LEASED, 0, T0, None, None),
    }
    for key, row in expected.items():
        got = await view(store, t, ids[key])
        assert (
            got.state,
            got.failures,
            got.available_at,
            got.finished_at,
            got.last_error,
        ) == row, key

    log = await store.notifications.deliveries(t)
    assert [(e.notification_id, e.outcome, e.detail, e.attempt, e.worker) for e in log] == [
        (ids["dead"], Outcome.PERMANENT, "bad recipient", 1, "w1"),
        (ids["throttled"], Outcome.THROTTLED, "429", 1, "w1"),
        (ids["retry"], Outcome.TRANSIENT, "HTTP 503", 1, "w1"),
        (ids["ok"], Outcome.DELIVERED, "", 1, "w1"),
    ]
    assert {e.tenant_id for e in log} == {t} and {e.provider_id for e in log} == {p}
    by_id = {e.notification_id: e for e in log}
    assert (by_id[ids["ok"]].ts, by_id[ids["ok"]].latency_s) == (T0 + 2, 2.0)

    assert await store.queue.complete([], worker="w1") == []
    with pytest.raises(ValueError, match="twice"):
        await store.queue.complete([batch[0], batch[0]], worker="w1")


async def test_transient_retries_count_failures_until_dead(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    await store.queue.enqueue(t, [new_notification(p, "k", max_attempts=3)], now=T0)
    now = T0
    for failures_after in (1, 2):
        [item] = await store.queue.claim(t, p, 1, owner="w", lease_s=10, now=now)
        assert item.failures == failures_after - 1
        c = done(item, QUEUED, available_at=now + 1, spend_attempt=True, detail="timeout")
        assert await store.queue.complete([c], worker="w") == [True]
        now += 1
    [item] = await store.queue.claim(t, p, 1, owner="w", lease_s=10, now=now)
    assert (item.failures, item.attempt, item.max_attempts) == (2, 3, 3)
    c = done(item, DEAD, outcome=Outcome.TRANSIENT, spend_attempt=True, ts=now)
    assert await store.queue.complete([c], worker="w") == [True]
    got = await view(store, t, item.id)
    assert (got.state, got.failures, got.attempt, got.finished_at) == (DEAD, 3, 3, now)


# -- due keys, depth -------------------------------------------------------------------------


async def test_due_keys_and_depth(store: Store) -> None:
    acme = await tenant_id(store, "acme")
    beta = await tenant_id(store, "beta")
    sms = await provider_id(store, "sms")
    mail = await provider_id(store, "mail")
    await store.queue.enqueue(
        acme,
        [
            new_notification(sms, "a1", available_at=T0 - 5),
            new_notification(sms, "a2"),
            new_notification(sms, "a3", available_at=T0 + 30),
            new_notification(mail, "a4", available_at=T0 + 20),
            new_notification(mail, "a5", available_at=T0 + 10),
        ],
        now=T0,
    )
    await store.queue.enqueue(
        beta,
        [new_notification(sms, "b1"), new_notification(sms, "b2"), new_notification(sms, "b3")],
        now=T0 + 1,
    )
    await store.queue.claim(beta, sms, 1, owner="w", lease_s=60, now=T0 + 1)  # leased: not queued
    await make_dead(store, beta, mail, "b-dead")

    steps: list[tuple[float, list[int] | None, list[DuePair]]] = [
        (
            T0 + 1,
            None,
            [
                DuePair(acme, sms, 2, T0 - 5),
                DuePair(acme, mail, 0, T0 + 10),
                DuePair(beta, sms, 2, T0 + 1),
            ],
        ),
        (
            T0 + 20,
            None,
            [
                DuePair(acme, sms, 2, T0 - 5),
                DuePair(acme, mail, 2, T0 + 10),
                DuePair(beta, sms, 2, T0 + 1),
            ],
        ),
        (T0 + 30, [acme], [DuePair(acme, sms, 3, T0 - 5), DuePair(acme, mail, 2, T0 + 10)]),
        (T0 + 1, [beta], [DuePair(beta, sms, 2, T0 + 1)]),
        (T0 + 1, [], []),
    ]
    for now, tenant_ids, expected in steps:
        got = await store.queue.due_pairs(now, tenant_ids)
        assert sorted(got, key=_due_order) == sorted(expected, key=_due_order), (now, tenant_ids)

    depth = sorted(await store.notifications.depth(), key=lambda r: (r.tenant_id, r.state.value))
    assert depth == [
        DepthRow(acme, QUEUED, 5, T0),
        DepthRow(beta, DEAD, 1, None),
        DepthRow(beta, LEASED, 1, None),
        DepthRow(beta, QUEUED, 2, T0 + 1),
    ]
    assert depth == await store.notifications.recount()


async def test_due_count_is_capped_and_depth_is_not(store: Store) -> None:
    """The dispatcher's probe reads at most DUE_CAP rows of a key; the counts stay exact."""
    acme = await tenant_id(store, "acme")
    sms = await provider_id(store, "sms")
    total = DUE_CAP + 7
    await store.queue.enqueue(acme, [new_notification(sms, f"k{i}") for i in range(total)], now=T0)
    assert await store.queue.due_pairs(T0, None) == [DuePair(acme, sms, DUE_CAP, T0)]
    assert await store.notifications.depth() == [DepthRow(acme, QUEUED, total, T0)]
    await store.queue.claim(acme, sms, 10, owner="w", lease_s=60, now=T0)
    assert await store.notifications.depth() == await store.notifications.recount()


async def test_due_keys_can_look_at_some_keys_only(store: Store) -> None:
    """``keys=`` probes only those keys (a key with nothing queued is left out); the tenant
    filter still applies."""
    acme, beta = await tenant_id(store, "acme"), await tenant_id(store, "beta")
    sms, mail = await provider_id(store, "sms"), await provider_id(store, "mail")
    await store.queue.enqueue(
        acme, [new_notification(sms, "a1"), new_notification(mail, "a2")], now=T0
    )
    await store.queue.enqueue(beta, [new_notification(sms, "b1")], now=T0)
    found = await store.queue.due_pairs(T0, None, pairs=[(acme, mail), (beta, sms), (beta, mail)])
    assert sorted(found, key=_due_order) == [DuePair(acme, mail, 1, T0), DuePair(beta, sms, 1, T0)]
    assert await store.queue.due_pairs(T0, [acme], pairs=[(acme, mail), (beta, sms)]) == [
        DuePair(acme, mail, 1, T0)
    ]
    assert await store.queue.due_pairs(T0, None, pairs=[]) == []
    everything = await store.queue.due_pairs(T0, None)
    assert len(everything) == 3


def _due_order(key: DuePair) -> tuple[int, int]:
    return key.tenant_id, key.provider_id


async def test_list_filters_and_pages(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    ids = list((await enqueue_keys(store, t, p, "a", "b", "c", "d")).values())
    dead = await make_dead(store, t, p, "x", "y")
    all_ids = sorted(ids + dead)
    steps: list[tuple[NotificationState | None, int, int, list[int]]] = [
        # (state, limit, after_id, ids listed)
        (None, 100, 0, all_ids),
        (None, 2, 0, all_ids[:2]),
        (None, 2, all_ids[1], all_ids[2:4]),
        (None, 100, all_ids[-1], []),
        (QUEUED, 100, 0, sorted(ids)),
        (DEAD, 100, 0, sorted(dead)),
        (DEAD, 1, dead[0], dead[1:]),
        (DELIVERED, 100, 0, []),
    ]
    for state, limit, after_id, expected in steps:
        got = await store.notifications.list_by_tenant(
            t, state=state, limit=limit, after_id=after_id
        )
        assert [v.id for v in got] == expected, (state, limit, after_id)
    assert await store.notifications.get(t, max(all_ids) + 1) is None


# -- dead letters ----------------------------------------------------------------------------


async def test_retry_dead_touches_only_that_tenants_dead_rows(store: Store) -> None:
    acme = await tenant_id(store, "acme")
    beta = await tenant_id(store, "beta")
    p = await provider_id(store, "sms")
    a_dead = await make_dead(store, acme, p, "ad1", "ad2", "ad3")
    b_dead = await make_dead(store, beta, p, "bd1")
    a_queued = list((await enqueue_keys(store, acme, p, "aq")).values())

    steps: list[tuple[str, int, list[int] | None, int]] = [
        # (what, tenant, ids, requeued)
        ("a queued row is not dead", acme, a_queued, 0),
        ("another tenant's dead row", acme, b_dead, 0),
        ("no ids", acme, [], 0),
        ("one of mine", acme, a_dead[:1], 1),
        ("again: no longer dead", acme, a_dead[:1], 0),
        ("all of mine", acme, None, 2),
        ("nothing left", acme, None, 0),
    ]
    for what, tenant, ids, count in steps:
        assert await store.notifications.dead_retry(tenant, ids, now=T0 + 50) == count, what

    for n_id in a_dead:
        got = await view(store, acme, n_id)
        assert (got.state, got.failures, got.available_at, got.finished_at) == (
            QUEUED,
            0,
            T0 + 50,
            None,
        )
        assert got.attempt == 1, "the fencing token never goes back"
    assert (await view(store, beta, b_dead[0])).state is DEAD
    assert (await view(store, acme, a_queued[0])).available_at == T0
    leased = await store.queue.claim(acme, p, 10, owner="w", lease_s=5, now=T0 + 50)
    assert {i.id: i.attempt for i in leased} == {**dict.fromkeys(a_dead, 2), a_queued[0]: 1}


async def test_discard_dead_touches_only_that_tenants_dead_rows(store: Store) -> None:
    acme = await tenant_id(store, "acme")
    beta = await tenant_id(store, "beta")
    p = await provider_id(store, "sms")
    a_dead = await make_dead(store, acme, p, "ad1", "ad2", "ad3")
    b_dead = await make_dead(store, beta, p, "bd1")
    a_queued = list((await enqueue_keys(store, acme, p, "aq")).values())

    steps: list[tuple[str, list[int] | None, int, list[int]]] = [
        # (what, ids, discarded, acme ids left)
        ("a queued row is not dead", a_queued, 0, sorted(a_dead + a_queued)),
        ("another tenant's dead row", b_dead, 0, sorted(a_dead + a_queued)),
        ("one of mine", a_dead[:1], 1, sorted(a_dead[1:] + a_queued)),
        ("all of mine", None, 2, a_queued),
        ("nothing left", None, 0, a_queued),
    ]
    for what, ids, count, left in steps:
        assert await store.notifications.dead_discard(acme, ids) == count, what
        assert [v.id for v in await store.notifications.list_by_tenant(acme)] == left, what
    assert [v.id for v in await store.notifications.list_by_tenant(beta)] == b_dead


# -- deliveries, workers ---------------------------------------------------------------------


async def test_deliveries_filter_limit_and_order(store: Store) -> None:
    t = await tenant_id(store, "acme")
    p = await provider_id(store, "sms")
    ids = await enqueue_keys(store, t, p, "a", "b", "c")
    ts = T0
    for _ in range(2):  # each notification fails once, then is delivered
        leased = await store.queue.claim(t, p, 3, owner="w", lease_s=10, now=ts)
        state = QUEUED if ts == T0 else DELIVERED
        batch = [done(i, state, ts=ts + 1, available_at=ts + 1) for i in leased]
        assert await store.queue.complete(batch, worker="w") == [True] * 3
        ts += 1

    steps: list[tuple[int | None, int, list[tuple[int, int]]]] = [
        # (notification_id, limit, (notification_id, attempt) newest first)
        (None, 100, [(ids[k], a) for a in (2, 1) for k in ("c", "b", "a")]),
        (None, 2, [(ids["c"], 2), (ids["b"], 2)]),
        (ids["b"], 100, [(ids["b"], 2), (ids["b"], 1)]),
        (ids["b"], 1, [(ids["b"], 2)]),
        (max(ids.values()) + 1, 100, []),
    ]
    for notification_id, limit, expected in steps:
        log = await store.notifications.deliveries(t, notification_id=notification_id, limit=limit)
        assert [(e.notification_id, e.attempt) for e in log] == expected, (notification_id, limit)


async def test_worker_heartbeats_upsert_and_alive_filter(store: Store) -> None:
    register = store.workers

    def worker(
        wid: str, heartbeat_at: float, state: str = "running", delivered: int = 0
    ) -> WorkerRecord:
        return WorkerRecord(wid, "host-1", 42, T0, heartbeat_at, state, 8, delivered)

    await register.heartbeat(worker("w1", T0))
    await register.heartbeat(dataclasses.replace(worker("w2", T0 + 1), started_at=T0 + 1))
    await register.heartbeat(dataclasses.replace(worker("w1", T0 + 5, delivered=7), host="ignored"))
    await register.heartbeat(
        dataclasses.replace(worker("w3", T0 + 6, "stopped"), started_at=T0 + 2)
    )

    got = await register.read()
    assert [w.id for w in got] == ["w1", "w2", "w3"], "ordered by start"
    assert got[0] == worker("w1", T0 + 5, delivered=7), "a heartbeat updates, never duplicates"

    steps: list[tuple[float, list[str]]] = [
        # (alive_since, ids alive): a stopped worker is never alive
        (T0, ["w1", "w2"]),
        (T0 + 1, ["w1", "w2"]),
        (T0 + 1.5, ["w1"]),
        (T0 + 5.5, []),
    ]
    for alive_since, expected in steps:
        assert [w.id for w in await register.read(alive_since=alive_since)] == expected, alive_since

    assert await register.forget(before=T0 + 2) == 1
    assert [w.id for w in await register.read()] == ["w1", "w3"]
