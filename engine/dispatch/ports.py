"""What the dispatcher and the directory need of a store, as protocols.

``engine.store.Store`` (SQLite or Postgres) provides them, and so does the planner's in-memory
queue (``engine.planning.memory_store``): the same dispatcher runs over either, which is what
lets a plan follow the dispatch policy exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.core.circuit import CircuitRecord
from engine.core.domain import BucketKey, Limit
from engine.store.circuits import Transition
from engine.store.records import (
    Completion,
    DuePair,
    Leased,
    PairLimit,
    ProviderRecord,
    Share,
    TenantRecord,
)

__all__ = ["CircuitBook", "ConfigSource", "DispatchQueue", "DispatchStore", "SendConfig"]


class DispatchQueue(Protocol):
    async def due_pairs(
        self,
        now: float,
        tenant_ids: Sequence[int] | None = None,
        *,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> list[DuePair]: ...

    async def queued_counts(self, share: Share | None = None) -> dict[tuple[int, int], int]: ...
    async def claim(
        self, tenant_id: int, provider_id: int, n: int, *, owner: str, lease_s: float, now: float
    ) -> list[Leased]: ...

    async def claim_many(
        self, asks: Sequence[tuple[int, int, int]], *, owner: str, lease_s: float, now: float
    ) -> list[list[Leased]]: ...
    async def release(self, owner: str, leased: Sequence[Leased]) -> int: ...

    async def complete(self, completions: Sequence[Completion], *, worker: str) -> list[bool]: ...


class CircuitBook(Protocol):
    async def all(self) -> dict[int, CircuitRecord]: ...

    async def change(
        self,
        provider_id: int,
        transition: Transition,
        *,
        now: float,
        audit: tuple[str, str] | None = None,
    ) -> tuple[CircuitRecord, bool]: ...


class DispatchStore(Protocol):
    """The queue and the providers' circuits: what ``Dispatcher`` and ``Circuits`` use."""

    @property
    def queue(self) -> DispatchQueue: ...

    @property
    def circuits(self) -> CircuitBook: ...


class SendConfig(Protocol):
    async def tenants(self) -> list[TenantRecord]: ...

    async def providers(self, *, with_secrets: bool = False) -> list[ProviderRecord]: ...

    async def pair_limits(self) -> list[PairLimit]: ...

    async def pair_limit_keys(self) -> list[tuple[BucketKey, Limit]]: ...


class ConfigSource(Protocol):
    """Tenants, providers and limits: what ``Directory`` loads."""

    @property
    def config(self) -> SendConfig: ...
