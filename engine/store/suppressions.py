"""Each tenant's suppression list: recipients a provider said are gone for good (migration 0010).

A row names a (tenant, provider, recipient) by the recipient's keyed digest
(``SecretBox.digest``), and keeps the recipient encrypted beside it, for listings (masked) and for
``keys rotate``, which recomputes the digests under the newest key. A lookup tries the digests
under every configured key (``SecretBox.digests``), so a list made before the keys changed still
holds until the rotation has run.

Rows come from two places: the completion of a send whose provider answered that the recipient
is gone (``record_gone``, in the completion's own transaction), and an operator (``add``). The
enqueue looks every new notification's recipient up in the same transaction that inserts it
(``gone_of`` on SQLite, a clause of ``pg_hot.ENQUEUE_SQL`` on Postgres): one found is inserted
``suppressed``, finished and never sent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox, mask
from engine.core.domain import NotificationState
from engine.core.errors import NotFound, SecretUnreadable
from engine.store.config import write_audit
from engine.store.database import Database
from engine.store.records import Completion, SuppressionRecord
from engine.store.schema import providers, suppressions, tenants

__all__ = [
    "SUPPRESSED_DETAIL",
    "SuppressionRepo",
    "gone_of",
    "record_gone",
]

S = suppressions
SUPPRESSED = NotificationState.SUPPRESSED.value
# The ``last_error`` of a notification suppressed when it was enqueued.
SUPPRESSED_DETAIL = "not sent: the recipient is on the tenant's suppression list for this provider"
_LOOKUP_CHUNK = 400  # digests per lookup: far below SQLite's 32,766 parameters
_REASON_MAX = 500
SOURCES = ("provider", "operator")


def gone_of(
    conn: sqlite3.Connection,
    tenant_id: int,
    wanted: Sequence[tuple[int, Sequence[str]]],
) -> set[int]:
    """SQLite, inside the enqueue's transaction: the indexes of ``wanted`` ((provider id,
    digests) per new notification) whose recipient the tenant suppressed for that provider."""
    by_digest: dict[str, list[int]] = {}
    for index, (_, digests) in enumerate(wanted):
        for digest in digests:
            by_digest.setdefault(digest, []).append(index)
    gone: set[int] = set()
    keys = list(by_digest)
    for start in range(0, len(keys), _LOOKUP_CHUNK):
        chunk = keys[start : start + _LOOKUP_CHUNK]
        marks = ", ".join(["?"] * len(chunk))
        found = conn.execute(
            "SELECT digest, provider_id FROM suppressions"
            f" WHERE tenant_id = ? AND digest IN ({marks})",
            [tenant_id, *chunk],
        ).fetchall()
        for digest, provider_id in found:
            gone.update(i for i in by_digest[digest] if wanted[i][0] == provider_id)
    return gone


async def record_gone(
    conn: AsyncConnection, box: SecretBox, done: Iterable[Completion], *, is_sqlite: bool
) -> None:
    """Inside a completion's transaction: put the recipient of each of ``done`` (applied
    completions whose provider said the recipient is gone) on its tenant's list, unless it is
    on it already (under any configured key's digest)."""
    for c in done:
        leased = c.leased
        if not leased.recipient:  # a lease handed back unread carries none (never gone)
            continue
        digests = box.digests(leased.recipient)
        if await _present(conn, leased.tenant_id, leased.provider_id, digests):
            continue
        row = {
            "tenant_id": leased.tenant_id,
            "provider_id": leased.provider_id,
            "digest": digests[0],
            "recipient": box.encrypt(leased.recipient),
            "reason": c.detail[:_REASON_MAX],
            "source": "provider",
            "notification_id": leased.id,
            "created_at": c.ts,
        }
        await conn.execute(_insert(is_sqlite), [row])


def _insert(is_sqlite: bool) -> Any:
    """An insert that leaves a recipient already on the list as it is."""
    if is_sqlite:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(S).on_conflict_do_nothing()
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    return pg_insert(S).on_conflict_do_nothing()


_LISTED = (
    S.c.id,
    tenants.c.name,
    providers.c.name,
    S.c.recipient,
    S.c.reason,
    S.c.source,
    S.c.created_at,
    S.c.notification_id,
)
_JOINED = S.join(tenants, tenants.c.id == S.c.tenant_id).join(
    providers, providers.c.id == S.c.provider_id
)


class SuppressionRepo:
    """Every read and write of the lists; each takes the tenant's id."""

    def __init__(self, db: Database, box: SecretBox) -> None:
        self._db = db
        self._box = box

    def _record(self, row: Sequence[Any]) -> SuppressionRecord:
        sid, tenant, provider, sealed, reason, source, created, notification = row
        try:
            shown = mask(self._box.decrypt(sealed))
        except SecretUnreadable:
            shown = "(unreadable with the configured keys)"
        return SuppressionRecord(
            sid, tenant, provider, shown, reason, source, created, notification
        )

    async def listing(
        self,
        tenant_id: int,
        *,
        provider_id: int | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[SuppressionRecord]:
        """The tenant's list, newest first, ``limit`` at most, those with an id below
        ``before_id`` (the next page's cursor: the last id of this one)."""
        where = [S.c.tenant_id == tenant_id]
        if provider_id is not None:
            where.append(S.c.provider_id == provider_id)
        if before_id is not None:
            where.append(S.c.id < before_id)
        query = sa.select(*_LISTED).select_from(_JOINED).where(*where)

        async def tx(conn: AsyncConnection) -> list[SuppressionRecord]:
            rows = await conn.execute(query.order_by(S.c.id.desc()).limit(limit))
            return [self._record(row) for row in rows]

        return await self._db.read(tx)

    async def count(self, tenant_id: int | None = None) -> dict[int, int]:
        """How many recipients each tenant (or just ``tenant_id``) suppressed, by tenant id."""
        query = sa.select(S.c.tenant_id, sa.func.count()).group_by(S.c.tenant_id)
        if tenant_id is not None:
            query = query.where(S.c.tenant_id == tenant_id)

        async def tx(conn: AsyncConnection) -> dict[int, int]:
            return {int(t): int(n) for t, n in await conn.execute(query)}

        return await self._db.read(tx)

    async def add(
        self,
        tenant_id: int,
        provider_id: int,
        recipients: Sequence[str],
        *,
        reason: str,
        provider: str,
        now: float,
        actor: str,
    ) -> int:
        """Put ``recipients`` on the tenant's list for the provider (one transaction, audited
        once, without the recipients); returns how many were not on it already."""
        given = list(dict.fromkeys(recipients))  # the first of a repeat
        digests = [self._box.digests(recipient) for recipient in given]
        flat = [d for per in digests for d in per]

        async def tx(conn: AsyncConnection) -> int:
            before = await _present(conn, tenant_id, provider_id, flat)
            fresh = [
                {
                    "tenant_id": tenant_id,
                    "provider_id": provider_id,
                    "digest": per[0],
                    "recipient": self._box.encrypt(recipient),
                    "reason": reason[:_REASON_MAX],
                    "source": "operator",
                    "notification_id": None,
                    "created_at": now,
                }
                for recipient, per in zip(given, digests, strict=True)
                if before.isdisjoint(per)
            ]
            if fresh:
                await conn.execute(_insert(self._db.is_sqlite), fresh)
            await write_audit(
                conn,
                now,
                actor,
                "suppression.add",
                tenant_id,
                {
                    "provider": provider,
                    "added": len(fresh),
                    "given": len(given),
                    "reason": reason[:100],
                },
            )
            return len(fresh)

        return await self._db.write(tx)

    async def remove_ids(
        self, tenant_id: int, ids: Sequence[int], *, now: float, actor: str
    ) -> int:
        """Take the tenant's entries ``ids`` off its list (others' ids are not its: left alone),
        audited; returns how many were."""

        async def tx(conn: AsyncConnection) -> int:
            removed = await _gone_ids(conn, tenant_id, ids)
            if removed:
                detail = {"ids": sorted(ids)[:100], "removed": removed}
                await write_audit(conn, now, actor, "suppression.remove", tenant_id, detail)
            return removed

        return await self._db.write(tx)

    async def remove(
        self,
        tenant_id: int,
        provider_id: int,
        recipient: str,
        *,
        provider: str,
        now: float,
        actor: str,
    ) -> None:
        """Take ``recipient`` off the tenant's list for the provider, audited; NotFound when it
        is not on it."""
        digests = self._box.digests(recipient)

        async def tx(conn: AsyncConnection) -> None:
            result = await conn.execute(
                S.delete().where(
                    S.c.tenant_id == tenant_id,
                    S.c.provider_id == provider_id,
                    S.c.digest.in_(digests),
                )
            )
            if not result.rowcount:
                raise NotFound(
                    "that recipient is not on the tenant's suppression list for this provider."
                )
            await write_audit(
                conn, now, actor, "suppression.remove", tenant_id, {"provider": provider}
            )

        await self._db.write(tx)


async def _gone_ids(conn: AsyncConnection, tenant_id: int, ids: Sequence[int]) -> int:
    result = await conn.execute(S.delete().where(S.c.tenant_id == tenant_id, S.c.id.in_(ids)))
    return int(result.rowcount)


async def _present(
    conn: AsyncConnection, tenant_id: int, provider_id: int, digests: Sequence[str]
) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(digests), _LOOKUP_CHUNK):
        query = sa.select(S.c.digest).where(
            S.c.tenant_id == tenant_id,
            S.c.provider_id == provider_id,
            S.c.digest.in_(digests[start : start + _LOOKUP_CHUNK]),
        )
        found.update(await conn.scalars(query))
    return found
