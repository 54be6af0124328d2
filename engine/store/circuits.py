"""Provider health in the store: the circuit every process shares (engine/core/circuit.py).

Reads are bounded: one row per provider. Every change is a read-modify-write of one row in one
write transaction, the row locked (``FOR UPDATE`` on Postgres; SQLite's ``BEGIN IMMEDIATE``
admits one writer), so a transition applies only to the state it was computed from: two
workers never both open a circuit, nor both take its probe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.circuit import Circuit, CircuitRecord, CircuitState, closed
from engine.core.errors import NotFound
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.schema import provider_health, providers

__all__ = ["CircuitsRepo", "Transition"]

H = provider_health
# Computes the row after a change from the row before; None leaves it as it is.
Transition = Callable[[CircuitRecord], CircuitRecord | None]


class CircuitsRepo:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._insert = db.insert

    async def all(self) -> dict[int, CircuitRecord]:
        """Every provider's circuit by provider id (closed for one never seen failing)."""
        query = sa.select(providers.c.id, providers.c.name, H).select_from(
            providers.outerjoin(H, H.c.provider_id == providers.c.id)
        )

        async def tx(conn: AsyncConnection) -> dict[int, CircuitRecord]:
            return {row.id: _health(row) for row in await conn.execute(query)}

        return await self._db.read(tx)

    async def change(
        self,
        provider_id: int,
        transition: Transition,
        *,
        now: float,
        audit: tuple[str, str] | None = None,
    ) -> tuple[CircuitRecord, bool]:
        """Apply ``transition`` to the provider's row as it is now; returns the row after, and
        whether ``transition`` changed it. ``audit`` = (actor, action) records the change in
        the audit log in the same transaction. Raises NotFound for an unknown provider."""

        async def tx(conn: AsyncConnection) -> tuple[CircuitRecord, bool]:
            await conn.execute(
                self._insert(H)
                .values(provider_id=provider_id, state=CircuitState.CLOSED.value, updated_at=now)
                .on_conflict_do_nothing(index_elements=[H.c.provider_id])
            )
            query = (
                sa.select(providers.c.id, providers.c.name, H)
                .select_from(providers.join(H, H.c.provider_id == providers.c.id))
                .where(providers.c.id == provider_id)
            )
            if not self._db.is_sqlite:
                query = query.with_for_update(of=H)
            row = (await conn.execute(query)).first()
            if row is None:  # pragma: no cover - the foreign key refuses the insert first
                raise NotFound(f"no provider with id {provider_id}.")
            before = _health(row)
            after = transition(before)
            if after is None:
                return before, False
            await conn.execute(
                H.update().where(H.c.provider_id == provider_id).values(_row(after, now))
            )
            if audit is not None:
                actor, action = audit
                detail = {"provider": after.view.provider, "state": after.view.state.value}
                await write_audit(conn, now, actor, action, None, detail)
            return after, True

        return await self._db.write(tx)


def _health(row: sa.Row[Any]) -> CircuitRecord:
    if row.state is None:
        return closed(row.name)
    view = Circuit(
        provider=row.name,
        state=CircuitState(row.state),
        since=row.since,
        last_error=row.last_error or "",
        next_probe_at=row.next_probe_at,
        failures=int(row.failures or 0),
    )
    return CircuitRecord(
        view,
        trips=int(row.trips or 0),
        probe_owner=row.probe_owner,
        probe_expires_at=row.probe_expires_at,
    )


def _row(h: CircuitRecord, now: float) -> dict[str, Any]:
    return {
        "state": h.view.state.value,
        "since": h.view.since,
        "last_error": h.view.last_error[:500],
        "next_probe_at": h.view.next_probe_at,
        "failures": h.view.failures,
        "trips": h.trips,
        "probe_owner": h.probe_owner,
        "probe_expires_at": h.probe_expires_at,
        "updated_at": now,
    }
