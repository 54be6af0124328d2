"""A provider kind that answers as a test says, on virtual time, and the helpers its tests
use to read back what happened to one notification."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from engine import (
    Engine,
    FakeClock,
    Message,
    NotificationView,
    Outcome,
    Provider,
    ProviderConfig,
    SendResult,
)

__all__ = ["Answer", "Call", "Script", "history", "setup", "view"]

Answer = SendResult | Callable[[Message], Awaitable[SendResult]]


@dataclass(frozen=True)
class Call:
    at_s: float  # the clock's monotonic() when the send began
    message: Message


@dataclass
class Script:
    """Shared by every provider a test's engines build (the kind 'scripted'): answers in
    order, then delivered. An answer may be a coroutine function, to hold or fail a send."""

    clock: FakeClock
    answers: deque[Answer] = field(default_factory=deque)
    calls: list[Call] = field(default_factory=list)

    def provider(self, config: ProviderConfig) -> Provider:
        return _ScriptedProvider(config.name, self)


class _ScriptedProvider:
    def __init__(self, name: str, script: Script) -> None:
        self.name = name
        self.script = script

    async def send(self, message: Message) -> SendResult:
        self.script.calls.append(Call(self.script.clock.monotonic(), message))
        answer = self.script.answers.popleft() if self.script.answers else SendResult.delivered()
        return answer if isinstance(answer, SendResult) else await answer(message)

    async def aclose(self) -> None:
        """Nothing to release."""


async def setup(engine: Engine, n: int = 1) -> list[int]:
    """Tenant 'acme', provider 'p' (scripted), ``n`` notifications keyed k0, k1, ..."""
    await engine.tenant_add("acme")
    await engine.provider_add("p", "scripted")
    return [
        (await engine.enqueue("acme", "p", f"user{i}@example.com", key=f"k{i}")).id
        for i in range(n)
    ]


async def view(engine: Engine, notification_id: int) -> NotificationView:
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    found = await engine.store.notifications.get(tenant_id, notification_id)
    assert found is not None
    return found


async def history(engine: Engine, notification_id: int) -> list[tuple[int, Outcome]]:
    """(attempt, outcome) of every delivery-log row of one notification, oldest first."""
    tenant_id = engine.directory.tenant_id("acme")
    assert tenant_id is not None
    rows = await engine.store.notifications.deliveries(tenant_id, notification_id=notification_id)
    return [(row.attempt, row.outcome) for row in sorted(rows, key=lambda r: r.id)]
