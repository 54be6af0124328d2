"""Helpers that several test modules share: skipping for a missing service, waiting on a
condition, what a ``file`` provider wrote and the checks over it, and the messages and
notifications tests build."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from engine import Engine, EnqueueItem, Message, NotificationState, Store
from engine.core.domain import Outcome
from engine.store import Completion, Leased, NotificationRow

__all__ = [
    "IN_CI",
    "Line",
    "assert_each_key_once",
    "check_sends",
    "counts",
    "enqueue_numbered",
    "eventually",
    "message",
    "missing",
    "new_notification",
    "read_lines",
    "wait_until",
]

IN_CI = bool(os.environ.get("CI"))

Line = dict[str, Any]


async def counts(store: Store) -> dict[tuple[int, NotificationState], int]:
    """How many notifications each (tenant id, state) holds."""
    return {(row.tenant_id, row.state): row.count for row in await store.notifications.depth()}


def missing(reason: str) -> NoReturn:
    """Skip a test for want of a service (``reason`` says which), or fail it under CI, where
    every service the suite needs must be there."""
    if IN_CI:
        pytest.fail(f"{reason} (CI is set, so this fails instead of skipping)")
    pytest.skip(reason)


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 10.0, what: str = "a condition"
) -> None:
    """Poll ``check`` (plain or async) on the running loop until it is true; ``AssertionError``
    naming ``what`` once ``timeout_s`` of real time has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = check()
        if await done if inspect.isawaitable(done) else done:
            return
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
        await asyncio.sleep(0.01)


def wait_until(
    check: Callable[[], bool], timeout_s: float = 60.0, what: str = "a condition"
) -> None:
    """``eventually`` for code with no event loop: sleeps the thread between polls."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
        time.sleep(0.02)


def read_lines(path: str | os.PathLike[str]) -> list[Line]:
    """The complete lines of a ``file`` provider's output, parsed; a line still being written
    is skipped, and a file not there yet has none."""
    file = Path(path)
    if not file.exists():
        return []
    text = file.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def assert_each_key_once(lines: Sequence[Line], expected: Iterable[str]) -> None:
    """Every key of ``expected`` was sent exactly once, and nothing else was."""
    sent = Counter(str(line["idempotency_key"]) for line in lines)
    twice = {k: n for k, n in sent.items() if n > 1}
    assert not twice, f"{len(twice)} keys sent more than once, e.g. {list(twice.items())[:5]}"
    unsent, foreign = set(expected) - set(sent), set(sent) - set(expected)
    assert not unsent, f"{len(unsent)} keys never sent, e.g. {sorted(unsent)[:5]}"
    assert not foreign, f"{len(foreign)} keys sent that were not expected: {sorted(foreign)[:5]}"


def check_sends(lines: Sequence[Line], keys: Sequence[str], *, attempts_rise: bool = False) -> int:
    """Every key sent at least once, and each repeat is the same notification (id and recipient)
    under another attempt, a higher one than the last in file order with ``attempts_rise``
    (one worker after another). Returns how many sends were repeats."""
    sends: defaultdict[str, list[Line]] = defaultdict(list)
    for line in lines:
        sends[line["idempotency_key"]].append(line)
    assert sorted(sends) == sorted(keys), "a notification was lost, or one appeared"
    for key, repeats in sends.items():
        assert len({r["notification_id"] for r in repeats}) == 1, (key, repeats)
        assert len({r["recipient"] for r in repeats}) == 1, (key, repeats)
        attempts = [r["attempt"] for r in repeats]
        expected = sorted(set(attempts)) if attempts_rise else list(dict.fromkeys(attempts))
        assert attempts == expected, (key, attempts)
    assert len({r[0]["notification_id"] for r in sends.values()}) == len(keys)
    return len(lines) - len(keys)


async def enqueue_numbered(
    engine: Engine, tenant: str, provider: str, n: int, *, chunk: int = 1000
) -> None:
    """Enqueue ``n`` notifications of ``tenant`` through ``provider``, ``chunk`` at a time:
    the ``i``-th keyed ``TENANT-i``, to ``useri@TENANT.example``, with the payload ``{"i": i}``."""
    items: list[EnqueueItem] = [
        EnqueueItem(provider, f"user{i}@{tenant}.example", {"i": i}, f"{tenant}-{i}", 0)
        for i in range(n)
    ]
    for start in range(0, n, chunk):
        await engine.enqueue_many(tenant, items[start : start + chunk])


def message(
    n: int = 1,
    payload: dict[str, Any] | None = None,
    *,
    provider: str = "audit",
    recipient: str = "bob@example.com",
    key: str | None = None,
    attempt: int = 1,
    delivery_attempt: int = 1,
) -> Message:
    """Notification ``n`` of tenant ``acme`` as a provider is asked to send it: keyed
    ``key-N`` and with the payload ``{"subject": "hi"}`` unless told otherwise. ``attempt`` is
    the lease's claim number, ``delivery_attempt`` the retry policy's (see ``Message``)."""
    body = {"subject": "hi"} if payload is None else payload
    key = key or f"key-{n}"
    return Message(n, "acme", provider, recipient, body, key, attempt, delivery_attempt)


def new_notification(
    provider_id: int,
    key: str,
    payload: dict[str, Any] | None = None,
    *,
    priority: int = 0,
    available_at: float | None = None,
    max_attempts: int = 5,
) -> NotificationRow:
    """A notification for the store to enqueue, keyed ``key``, to ``KEY@example.com``, with the
    payload ``{"key": key}`` unless told otherwise."""
    return NotificationRow(
        provider_id=provider_id,
        recipient=f"{key}@example.com",
        payload={"key": key} if payload is None else payload,
        idempotency_key=key,
        priority=priority,
        max_attempts=max_attempts,
        available_at=available_at,
    )


def delivered_at(leased: Leased, ts: float) -> Completion:
    """``leased``'s completion as delivered at ``ts``, a second after its enqueue."""
    return Completion(
        leased=leased,
        outcome=Outcome.DELIVERED,
        state=NotificationState.DELIVERED,
        detail="",
        ts=ts,
        latency_s=1.0,
    )
