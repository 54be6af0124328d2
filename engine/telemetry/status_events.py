"""Status events in a snapshot: each endpoint's outbox as the metrics and ``omnipost stats``
show it, read from the store's index of undelivered events (never the delivered ones)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.store.endpoints import EndpointRecord
from engine.store.outbox import EndpointHealth

__all__ = ["EndpointFigures", "EventFigures", "event_figures"]


@dataclass(frozen=True, slots=True)
class EndpointFigures:
    tenant: str
    endpoint_id: int
    enabled: bool
    pending: int  # waiting or being posted
    held: int  # waiting for the endpoint to be enabled
    failed: int  # given up after every retry
    oldest_pending_age_s: float | None  # the oldest waiting event's age


@dataclass(frozen=True, slots=True)
class EventFigures:
    written: int  # the outbox's highest event id: events written since the store was made
    endpoints: tuple[EndpointFigures, ...]
    failures: tuple[tuple[str, int], ...]  # this engine's failed tries by answer ("503")


def event_figures(
    found: Iterable[EndpointRecord],
    health: Mapping[int, EndpointHealth],
    tenant_names: Mapping[int, str],
    *,
    now: float,
    written: int,
    failures: Iterable[tuple[str, int]],
) -> EventFigures:
    figures = []
    for e in found:
        h = health[e.id]
        oldest = h.oldest_pending_at
        figures.append(
            EndpointFigures(
                tenant_names.get(e.tenant_id, str(e.tenant_id)),
                e.id,
                e.disabled_at is None,
                h.pending,
                h.held,
                h.failed,
                None if oldest is None else max(0.0, now - oldest),
            )
        )
    return EventFigures(written, tuple(figures), tuple(failures))
