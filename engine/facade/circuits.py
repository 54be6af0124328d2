"""Provider health for the console and the CLI: every circuit, and "resume now".

The dispatcher keeps the engine's view of each circuit (engine/dispatch/circuit.py); these read
models ask the store, so that a short-lived process (``omnipost provider list``) sees what the
workers see.
"""

from __future__ import annotations

from engine.core.circuit import Circuit, CircuitState
from engine.core.errors import NotFound
from engine.facade.parts import EngineParts

__all__ = ["CircuitsPart"]


class CircuitsPart(EngineParts):
    async def circuit_states(self) -> dict[str, Circuit]:
        """Every provider's circuit by provider name, as the store has it now (one row per
        provider); the engine's own view is brought up to date as well."""
        circuits = self.dispatcher.circuits
        await circuits.refresh()
        return {h.provider: h for h in circuits.view()}

    async def circuit_holds(self) -> tuple[Circuit, ...]:
        """The open circuits that hold all the work left: every provider with queued
        notifications has its circuit open and none of them is in flight. Empty while any
        queued notification can still go out (or none is queued). ``omnipost worker
        --until-empty`` stops on it rather than wait for a provider that may never come back."""
        work = await self.store.queue.providers_with_work()
        if not work or any(work.values()):
            return ()
        circuits = self.dispatcher.circuits
        held = [circuits.health(pid) for pid in work]
        if any(h.state is not CircuitState.OPEN for h in held):
            return ()
        return tuple(sorted((h.view for h in held), key=lambda v: v.provider))

    async def circuit_close(self, name: str, *, actor: str | None = None) -> Circuit:
        """Close the provider's circuit now (an operator knows it is back): its notifications
        are leased again at once, by every worker once it reads the store. Audited as
        ``provider.resume`` by ``actor`` (the engine's own by default). Raises NotFound for an
        unknown provider."""
        provider_id = self.directory.provider_id(name)
        if provider_id is None:
            await self.directory.refresh()
            provider_id = self.directory.provider_id(name)
        if provider_id is None:
            raise NotFound(f"no provider named {name!r}.")
        health = await self.dispatcher.circuits.resume(provider_id, actor=actor or self.actor)
        self.dispatcher.wake()
        return health
