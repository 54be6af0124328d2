"""A provider's circuit: a circuit breaker per provider, as pure rules with time as an argument.

A provider's circuit is ``closed`` while it works. ``failures`` provider-level failures in a
row (refused connections, TLS or login failures, timeouts, 5xx: see ``SendResult``'s
``is_provider_fault``) open it: its notifications stay queued without spending attempts and
no worker leases them. Once ``next_probe_at`` comes, one worker (of all processes) takes the
probe (``half-open``) and sends one notification: an answer from the provider closes the
circuit, another provider-level failure opens it again for twice as long, up to
``backoff_max_s``.

The back-off has no jitter: only one probe runs at a time across every process (the store
decides who takes it), so there is no herd to spread, and a fixed schedule lets the console
say exactly when the next probe goes out.

These functions only compute; ``engine/dispatch/circuit.py`` carries them out against the store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

__all__ = [
    "Circuit",
    "CircuitRecord",
    "CircuitSettings",
    "CircuitState",
    "closed",
    "on_failure",
    "on_probe_failed",
    "on_resume",
    "probe_due",
    "release_probe",
    "take_probe",
]


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True, slots=True)
class Circuit:
    """One provider's circuit as every process sees it. ``since`` (unix s) is when the state
    began (an outage's start while it is open or half-open); ``last_error`` is one redacted
    line (never a recipient or a secret); ``next_probe_at`` (unix s) is when a probe may go
    out while open; ``failures`` counts provider-level failures in a row (0 when closed)."""

    provider: str
    state: CircuitState
    since: float | None = None
    last_error: str = ""
    next_probe_at: float | None = None
    failures: int = 0


@dataclass(frozen=True, slots=True)
class CircuitSettings:
    """A provider's options ``circuit_failures``, ``circuit_backoff_s`` and
    ``circuit_backoff_max_s`` (read and checked by ``engine.providers.schema.circuit_settings``)."""

    failures: int = 3  # provider-level failures in a row that open the circuit
    backoff_s: float = 5.0  # the first wait before a probe; doubles after each failed probe
    backoff_max_s: float = 300.0

    def backoff(self, trips: int) -> float:
        """The wait before the probe after the ``trips``-th opening in a row (from 1)."""
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** min(max(trips, 1) - 1, 60))


@dataclass(frozen=True, slots=True)
class CircuitRecord:
    """The stored row behind a ``Circuit``: also the openings in a row (``trips``,
    which set the back-off) and the probe's lease (owner and expiry)."""

    view: Circuit
    trips: int = 0
    probe_owner: str | None = None
    probe_expires_at: float | None = None

    @property
    def state(self) -> CircuitState:
        return self.view.state


def closed(provider: str) -> CircuitRecord:
    """A provider never seen failing."""
    return CircuitRecord(Circuit(provider, CircuitState.CLOSED))


def on_failure(
    h: CircuitRecord, run: int, *, now: float, error: str, settings: CircuitSettings
) -> CircuitRecord:
    """After a provider-level failure that makes ``run`` in a row: opened when a closed circuit
    reaches the threshold; otherwise unchanged (an open one already waits for its probe)."""
    if h.state is not CircuitState.CLOSED or run < settings.failures:
        return h
    view = Circuit(
        h.view.provider,
        CircuitState.OPEN,
        since=now,
        last_error=error,
        next_probe_at=now + settings.backoff(1),
        failures=run,
    )
    return CircuitRecord(view, trips=1)


def probe_due(h: CircuitRecord, now: float) -> bool:
    """Whether a worker may take the probe now: the circuit is open and its back-off is over,
    or the worker that took the probe let its lease run out (it may have died)."""
    if h.state is CircuitState.OPEN:
        return h.view.next_probe_at is None or h.view.next_probe_at <= now
    if h.state is CircuitState.HALF_OPEN:
        return h.probe_expires_at is None or h.probe_expires_at <= now
    return False


def take_probe(h: CircuitRecord, owner: str, *, now: float, lease_s: float) -> CircuitRecord | None:
    """``h`` half-open with ``owner`` holding the probe until ``now + lease_s``; None when the
    probe is not due."""
    if not probe_due(h, now):
        return None
    view = replace(h.view, state=CircuitState.HALF_OPEN)
    return replace(h, view=view, probe_owner=owner, probe_expires_at=now + lease_s)


def release_probe(h: CircuitRecord) -> CircuitRecord:
    """Open again as it was, the probe given back unused (nothing was due to send): the next
    worker with work for the provider may take it at once."""
    return replace(
        h, view=replace(h.view, state=CircuitState.OPEN), probe_owner=None, probe_expires_at=None
    )


def on_probe_failed(
    h: CircuitRecord, *, now: float, error: str, settings: CircuitSettings
) -> CircuitRecord:
    """The probe failed at the provider: open again, for twice as long as last time."""
    trips = h.trips + 1
    view = replace(
        h.view,
        state=CircuitState.OPEN,
        since=h.view.since if h.view.since is not None else now,
        last_error=error,
        next_probe_at=now + settings.backoff(trips),
        failures=h.view.failures + 1,
    )
    return CircuitRecord(view, trips=trips)


def on_resume(h: CircuitRecord, *, now: float) -> CircuitRecord:
    """Closed now: by a probe the provider answered, or by an operator. ``last_error`` stays,
    to say what the last outage was."""
    view = Circuit(h.view.provider, CircuitState.CLOSED, since=now, last_error=h.view.last_error)
    return CircuitRecord(view)
