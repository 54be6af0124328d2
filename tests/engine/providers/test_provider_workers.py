"""Twilio, FCM and APNs end to end through an ``omnipost worker`` process, on SQLite and on
Postgres: the tenant and two providers of the kind are set up with the CLI, one pointing at a
loopback server of the vendor's API (``testkit.provider_loopback``) with the right credentials,
the other with credentials the server refuses. One worker run per kind and store covers every
outcome, by recipient: delivered; throttled first (429 with Retry-After, then delivered, no
attempt spent); failing first (503, then delivered on a retry); refused (400, dead at once);
gone for good (the vendor's own answer: dead at once, and the recipient on the tenant's
suppression list for the provider, so that a notification to it enqueued afterwards is
suppressed); and, for the refused credentials, the circuit opens and everything stays queued,
nothing dead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from app.paths import Paths, load_box
from engine import (
    BUILTIN_KINDS,
    Engine,
    LocalLimiter,
    NotificationState,
    NotificationView,
    Store,
    SystemClock,
)
from testkit.cli import Cli
from testkit.provider_loopback import (
    KINDS,
    STEP_STATUS,
    ApnsLoopback,
    BackgroundLoop,
    FcmLoopback,
    Loopback,
    Plans,
    Step,
    TwilioLoopback,
    enqueue,
    provider_flags,
    run_worker,
)

pytestmark = pytest.mark.slow

DELIVERED, DEAD, QUEUED = (
    NotificationState.DELIVERED,
    NotificationState.DEAD,
    NotificationState.QUEUED,
)
# case -> (the steps its recipients are answered with, then the end: state, failures)
CASES: dict[str, tuple[list[Step], NotificationState, int]] = {
    "delivered": ([], DELIVERED, 0),
    "throttled": (["throttle"], DELIVERED, 0),  # a 429 spends no attempt
    "transient": (["fail"], DELIVERED, 1),
    "permanent": (["refuse"], DEAD, 0),
    "gone": (["gone"], DEAD, 0),  # and suppressed from then on
}
PER_CASE = 2
LOCKED = 3  # notifications through the provider whose credentials are refused: its circuit
# opens after three provider-level failures in a row (the default circuit_failures)


def fcm_loopback(plans: Plans) -> Loopback:
    # A token lives 61 s, so the provider takes it for 1 s (it fetches again a minute early);
    # the first token is revoked: its sends are answered 401.
    return FcmLoopback(plans, lifetime_s=61, revoke_first=True)


LOOPBACKS: dict[str, Callable[[Plans], Loopback]] = {
    "twilio": TwilioLoopback,
    "fcm": fcm_loopback,
    "apns": ApnsLoopback,
}
# FCM's worker sends one at a time: then its one 401, and the one fetch that follows it, are
# told apart from the fetches of an expired token (concurrent sends share a token).
CONCURRENCY = {"twilio": 8, "fcm": 1, "apns": 8}


async def _views(store_url: str, home: Path) -> dict[str, NotificationView]:
    async with (
        Store(store_url, load_box(Paths(home))) as store,
        Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine,
    ):
        return {v.idempotency_key: v for v in await engine.notifications("acme", limit=1000)}


@pytest.mark.parametrize("kind", KINDS)
def test_every_outcome_through_a_worker_process(
    kind: str, cli: Cli, store_url: str, tmp_path: Path
) -> None:
    plans = Plans()
    loopback = LOOPBACKS[kind](plans)
    cases = {f"{c}-{n}": c for n, c in enumerate(c for c in CASES for _ in range(PER_CASE))}
    recipients = {key: loopback.recipient(n) for n, key in enumerate(cases)}
    plans.steps.update({recipients[key]: CASES[case][0] for key, case in cases.items()})
    locked = {f"locked-{n}": loopback.recipient(100 + n) for n in range(LOCKED)}
    with BackgroundLoop() as loop:
        loopback.start(loop, tmp_path)
        cli.ok("tenant", "add", "acme")
        cli.ok("provider", "add", "push", "--kind", kind, *provider_flags(loopback.options()))
        flags = provider_flags(loopback.options(locked=True))
        cli.ok("provider", "add", "locked", "--kind", kind, *flags)
        enqueue(
            cli,
            tmp_path,
            [(k, "push", r) for k, r in recipients.items()]
            + [(k, "locked", r) for k, r in locked.items()],
        )
        code, log = run_worker(tmp_path, store_url, CONCURRENCY[kind])
        # Enqueued again after the run: suppressed (never queued) only when it was gone.
        again = {
            key: cli.ok("enqueue", "acme", "push", recipients[key], "--key", f"again-{key}")
            for key, case in cases.items()
            if case in ("gone", "permanent")
        }
    views = asyncio.run(_views(store_url, tmp_path))

    # Stopped when only the locked provider's notifications were left, held by its circuit.
    assert code == 1, log
    assert "provider locked unavailable, circuit open" in log, log
    answered: dict[str, list[int]] = {}
    for hit in loopback.hits():
        answered.setdefault(hit.recipient, []).append(hit.status)
    status = {**STEP_STATUS, "gone": loopback.gone[0]}
    for key, recipient in recipients.items():
        steps, state, failures = CASES[cases[key]]
        view = views[key]
        assert (view.state, view.failures) == (state, failures), (key, view)
        ok = [loopback.ok_status] if state is DELIVERED else []
        assert answered[recipient] == [status[s] for s in steps] + ok, key
        if state is DEAD:
            said = loopback.gone[1] if cases[key] == "gone" else "400"
            assert view.last_error is not None and said in view.last_error, view
            assert recipient not in view.last_error
    for key, recipient in locked.items():
        assert (views[key].state, views[key].failures) == (QUEUED, 0), views[key]
        assert not {s for s in answered.get(recipient, []) if s < 300}, answered[recipient]
    health = {p["name"]: p["health"]["state"] for p in cli.json("provider", "list")}
    assert health == {"push": "closed", "locked": "open"}
    dead = cli.json("dead", "list")
    assert sorted(d["key"] for d in dead) == sorted(k for k, v in views.items() if v.state is DEAD)
    check_suppression(cli, {k: r for k, r in recipients.items() if cases[k] == "gone"}, views)
    for key, out in again.items():
        view, gone = views[f"again-{key}"], cases[key] == "gone"
        assert out.startswith(f"{'suppressed' if gone else 'queued'} as {view.id} "), out
        assert view.state is (NotificationState.SUPPRESSED if gone else QUEUED), view
    queue = cli.json("stats")["queue"]
    assert (queue["queued"], queue["suppressed"]) == (LOCKED + PER_CASE, PER_CASE), queue

    outputs = [*cli.transcript, log, *(v.last_error or "" for v in views.values())]
    for secret in loopback.secrets:
        assert not [text for text in outputs if secret in text], f"{kind} secret shown"
    for recipient in [*recipients.values(), *locked.values()]:
        assert not [text for text in outputs if recipient in text], f"{recipient} shown"
    check_kind(loopback, answered, locked)


def check_suppression(cli: Cli, gone: dict[str, str], views: dict[str, NotificationView]) -> None:
    """Each recipient answered "gone" is on acme's list for push once, put there by the
    provider with its dead notification, and shown masked; no other recipient is (those
    refused were dead for that notification only)."""
    listed = cli.json("suppression", "list", "acme")
    assert sorted((e["provider"], e["source"], e["notification_id"]) for e in listed) == sorted(
        ("push", "provider", views[key].id) for key in gone
    ), listed
    masked = {e["notification_id"]: e["recipient_masked"] for e in listed}
    for key, recipient in gone.items():
        assert masked[views[key].id] == f"{recipient[:2]}{'*' * 8}{recipient[-2:]}", masked


def check_kind(loopback: Loopback, answered: dict[str, list[int]], locked: dict[str, str]) -> None:
    """What each vendor's server saw of the credentials."""
    if isinstance(loopback, TwilioLoopback):  # every send of the locked provider failed Basic auth
        assert all(answered[r] and set(answered[r]) == {401} for r in locked.values())
    elif isinstance(loopback, ApnsLoopback):  # every JWT of the locked provider was refused
        assert all(answered[r] and set(answered[r]) == {403} for r in locked.values())
        assert {s["version"] for s in loopback.seen} == {"2"}
    elif isinstance(loopback, FcmLoopback):
        # The locked account's assertions were refused at the token endpoint: it never sent.
        assert not any(r in answered for r in locked.values())
        issued = loopback.google.issued
        # The revoked first token was answered 401 once (one send at a time), and the provider
        # fetched a second then; it fetched more only when the second had expired (a throttled
        # send went again 1 s later, and the provider keeps a token of 61 s for 1 s).
        assert loopback.rejected == [issued[0]]
        assert len(issued) >= 3, issued
