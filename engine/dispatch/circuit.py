"""The dispatcher's circuit breakers: engine/core/circuit.py's rules carried out against the store.

Each engine keeps a view of every provider's circuit, read from the store on the dispatcher's
refresh and updated at once by its own transitions (each one a single-row transaction that
applies only to the state it was computed from, so two workers never both open a circuit nor
both take its probe). It counts its own provider-level failures in a row; the one that reaches
a provider's threshold opens the circuit for every process.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from engine.core.circuit import (
    Circuit,
    CircuitRecord,
    CircuitSettings,
    CircuitState,
    closed,
    on_failure,
    on_probe_failed,
    on_resume,
    probe_due,
    release_probe,
    take_probe,
)
from engine.core.clock import Clock
from engine.core.domain import NotificationState, Outcome, SendResult
from engine.core.errors import OmniPostError
from engine.core.policy import Decision
from engine.dispatch.directory import Directory
from engine.dispatch.ports import DispatchStore
from engine.providers.base import ProviderConfig
from engine.providers.schema import circuit_settings
from engine.store import Leased
from engine.store.circuits import Transition

__all__ = ["Circuits"]

log = logging.getLogger(__name__)


class Circuits:
    """Every provider's circuit as this engine knows it, and the transitions it makes.

    ``probe_lease_s`` bounds how long a probe may hold a circuit half-open: a worker that dies
    mid-probe lets another take the probe once it runs out."""

    def __init__(
        self,
        store: DispatchStore,
        directory: Directory,
        clock: Clock,
        *,
        owner: str,
        probe_lease_s: float,
    ) -> None:
        self._store = store
        self._dir = directory
        self._clock = clock
        self.owner = owner
        self.probe_lease_s = probe_lease_s
        self._health: dict[int, CircuitRecord] = {}
        self.all_closed = True  # every circuit known here is closed (asked per send)
        self._runs: dict[int, int] = {}  # this engine's provider-level failures in a row
        self._probes: set[int] = set()  # ids of the notifications sent as probes
        self.read_at = -math.inf  # monotonic time of the last read from the store

    # -- the view ---------------------------------------------------------------------------

    def health(self, provider_id: int) -> CircuitRecord:
        found = self._health.get(provider_id)
        if found is not None:
            return found
        record = self._dir.providers.get(provider_id)
        return closed(record.name if record is not None else str(provider_id))

    def blocked_for_s(self, provider_id: int, now: float) -> float:
        """How long the provider's pairs wait before a probe may go out (0: not blocked, its
        pairs are served; a probe when its circuit is open)."""
        h = self.health(provider_id)
        if h.state is CircuitState.CLOSED or probe_due(h, now):
            return 0.0
        until = h.view.next_probe_at if h.state is CircuitState.OPEN else h.probe_expires_at
        return max(0.0, (until or now) - now) or 0.001

    def is_closed(self, provider_id: int) -> bool:
        # ``health(provider_id).state``, without making the closed ``CircuitRecord`` of a provider
        # not read yet: asked several times per send.
        found = self._health.get(provider_id)
        return found is None or found.view.state is CircuitState.CLOSED

    def _noted(self) -> None:
        """After ``_health`` changed: whether every circuit is closed."""
        closed_ = CircuitState.CLOSED
        self.all_closed = all(h.view.state is closed_ for h in self._health.values())

    def view(self) -> tuple[Circuit, ...]:
        """Every provider's health (configured here or read from the store), by name."""
        shown = [self.health(pid).view for pid in self._dir.providers.keys() | self._health]
        return tuple(sorted(shown, key=lambda h: h.provider))

    async def refresh(self) -> None:
        """Read every circuit from the store (one row per provider)."""
        self.read_at = self._clock.monotonic()
        fresh = await self._store.circuits.all()
        for pid, h in fresh.items():
            before = self._health.get(pid)
            if before is not None and before.state is not h.state:
                log.info("provider %s: circuit %s (seen in the store)", h.view.provider, h.state)
        self._health = fresh
        self._noted()

    def settings(self, provider_id: int) -> CircuitSettings:
        record = self._dir.providers.get(provider_id)
        if record is None:
            return CircuitSettings()
        try:
            return circuit_settings(ProviderConfig(record.name, record.kind, record.options))
        except OmniPostError:  # saved before the options were checked; the defaults apply
            return CircuitSettings()

    # -- transitions ------------------------------------------------------------------------

    async def take_probe(self, provider_id: int) -> bool:
        """Take the provider's probe if it is due and no other worker holds it."""
        now = self._clock.wall()
        return await self._change(
            provider_id, lambda h: take_probe(h, self.owner, now=now, lease_s=self.probe_lease_s)
        )

    async def probing(self, provider_id: int, leased: Sequence[Leased]) -> None:
        """After ``take_probe``: the first of ``leased`` is the probe; with none leased (another
        worker took them), the probe is given back for the next worker with work."""
        if leased:
            self._probes.add(leased[0].id)
            return

        def back(h: CircuitRecord) -> CircuitRecord | None:
            return release_probe(h) if self._holds_probe(h) else None

        await self._change(provider_id, back)

    def settled(self, item: Leased, result: SendResult) -> bool:
        """``after_send`` for the common case, at once: True when the send was not the
        provider's fault, was no probe and the provider's circuit is closed (the provider's
        run of failures is over; the retry policy decides); False, with nothing done, when
        ``after_send`` has more to do."""
        if result.is_provider_fault or not (self.all_closed or self.is_closed(item.provider_id)):
            return False
        if self._probes and item.id in self._probes:
            return False
        self._runs[item.provider_id] = 0
        return True

    async def after_send(self, item: Leased, result: SendResult) -> Decision | None:
        """Account for one send's result. Returns the decision when the circuit holds the
        notification (queued again, no attempt spent, due after the first back-off: never dead
        for the provider's fault), or None to let the retry policy decide. Every UNAVAILABLE
        result is held."""
        provider_id, probe = item.provider_id, item.id in self._probes
        self._probes.discard(item.id)
        if not result.is_provider_fault:
            self._runs[provider_id] = 0
            if probe:
                await self._close(provider_id)
            return None
        settings = self.settings(provider_id)
        held = Decision(NotificationState.QUEUED, delay_s=settings.backoff_s)
        if probe:
            await self._reopen(provider_id, result.detail, settings)
            return held
        if not self.is_closed(provider_id):
            return held  # in flight when the circuit opened
        run = self._runs[provider_id] = self._runs.get(provider_id, 0) + 1
        if run >= settings.failures:
            await self._open(provider_id, run, result.detail, settings)
            return held
        return held if result.outcome is Outcome.UNAVAILABLE else None

    async def resume(self, provider_id: int, *, actor: str) -> Circuit:
        """Close the circuit now, whatever its state (an operator's "resume now"); audited."""
        now = self._clock.wall()
        self._runs[provider_id] = 0
        h, _ = await self._store.circuits.change(
            provider_id,
            lambda h: on_resume(h, now=now),
            now=now,
            audit=(actor, "provider.resume"),
        )
        self._health[provider_id] = h
        self._noted()
        log.info("provider %s: circuit closed by %s", h.view.provider, actor)
        return h.view

    async def _open(
        self, provider_id: int, run: int, error: str, settings: CircuitSettings
    ) -> None:
        now = self._clock.wall()
        if await self._change(
            provider_id,
            lambda h: _changed(h, on_failure(h, run, now=now, error=error, settings=settings)),
        ):
            h = self.health(provider_id)
            log.warning(
                "provider %s is unavailable (%s); circuit open, next probe in %.0fs",
                h.view.provider,
                error,
                settings.backoff(1),
            )

    async def _reopen(self, provider_id: int, error: str, settings: CircuitSettings) -> None:
        now = self._clock.wall()

        def again(h: CircuitRecord) -> CircuitRecord | None:
            if not self._holds_probe(h):
                return None
            return on_probe_failed(h, now=now, error=error, settings=settings)

        if await self._change(provider_id, again):
            h = self.health(provider_id)
            wait_s = (h.view.next_probe_at or now) - now
            log.info(
                "provider %s: probe failed (%s); next in %.0fs", h.view.provider, error, wait_s
            )

    async def _close(self, provider_id: int) -> None:
        now = self._clock.wall()

        def close(h: CircuitRecord) -> CircuitRecord | None:
            return on_resume(h, now=now) if self._holds_probe(h) else None

        if await self._change(provider_id, close):
            log.info(
                "provider %s answers again; circuit closed", self.health(provider_id).view.provider
            )

    def _holds_probe(self, h: CircuitRecord) -> bool:
        return h.state is CircuitState.HALF_OPEN and h.probe_owner == self.owner

    async def _change(self, provider_id: int, transition: Transition) -> bool:
        """Apply ``transition`` in the store and keep the row it leaves; a store failure is
        logged and changes nothing (the next failure, refresh or probe lease tries again)."""
        try:
            h, changed = await self._store.circuits.change(
                provider_id, transition, now=self._clock.wall()
            )
        except OmniPostError as exc:
            log.warning("provider health not written: %s", exc.message)
            return False
        self._health[provider_id] = h
        self._noted()
        return changed

    def __repr__(self) -> str:
        shown = {h.view.provider: h.state.value for h in self._health.values()}
        return f"Circuits(owner={self.owner!r}, {shown})"


def _changed(before: CircuitRecord, after: CircuitRecord) -> CircuitRecord | None:
    return None if after is before else after
