"""Each tenant's suppression list: recipients a provider said are gone for good (migration 0010).

A row names a (tenant, provider, recipient) by the recipient's keyed digest
(``SecretBox.digest``), and keeps the recipient encrypted beside it, for listings (masked) and for
``keys rotate``, which recomputes the digests under the newest key. A lookup tries the digests
under every configured key (``SecretBox.digests``), so a list made before the keys changed still
holds until the rotation has run.

Rows come from two places: the completion of a send whose provider answered that the recipient
is gone (``record_gone``, in the completion's own transaction), and an operator (``add``). The
enqueue looks every new notification's recipient up in the same transaction that inserts it
(``gone_of`` on SQLite, a clause of ``pg_hot.enqueue_sql`` on Postgres): one found is inserted
``suppressed``, finished and never sent. What was queued before an operator's ``add`` is found
by ``SuppressionRepo.suppress_queued``, which reads the tenant's queued notifications for the
provider a page at a time (their recipients are sealed, so each is opened: the cost of an
operator's act, never of a send); a provider's answer suppresses no queued notification (each
gets the same answer when its turn comes, and dies).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox, mask
from engine.core.domain import NotificationState, recipient_key
from engine.core.errors import NotFound, SecretUnreadable
from engine.store.audit import write_audit
from engine.store.database import Database
from engine.store.records import Completion, SuppressionRecord
from engine.store.schema import notifications, providers, suppressions, tenants

__all__ = [
    "REASON_MAX",
    "SUPPRESSED_DETAIL",
    "SuppressionRepo",
    "by_item",
    "gone_of",
    "lazy_digests",
    "record_gone",
    "suppressed_of",
]

S = suppressions
SUPPRESSED = NotificationState.SUPPRESSED.value
# The ``last_error`` of a notification suppressed when it was enqueued.
SUPPRESSED_DETAIL = "not sent: the recipient is on the tenant's suppression list for this provider"
_LOOKUP_CHUNK = 400  # digests per lookup: far below SQLite's 32,766 parameters
_SWEEP_PAGE = 1000  # queued notifications read at a time by suppress_queued
REASON_MAX = 500
SOURCES = ("provider", "operator")


def lazy_digests(box: SecretBox, recipients: Sequence[str]) -> Callable[[], list[list[str]]]:
    """What a list is looked up by, made when called: the digests of ``recipients`` (their
    usual form), per configured key (the newest first), each in the order given. A closure,
    whose repr shows no recipient, wherever it is logged."""

    def made() -> list[list[str]]:
        return box.digest_columns([recipient_key(r) for r in recipients])

    return made


def by_item(
    provider_ids: Sequence[int], digests: Callable[[], Sequence[Sequence[str]]]
) -> list[tuple[int, Sequence[str]]]:
    """What ``gone_of`` wants: each item's provider id and its digests (``digests()``'
    columns: newest key first)."""
    return list(zip(provider_ids, zip(*digests(), strict=True), strict=True))


def gone_of(
    conn: sqlite3.Connection,
    tenant_id: int,
    wanted: Sequence[tuple[int, Sequence[str]]],
) -> set[int]:
    """SQLite, inside the enqueue's transaction: the indexes of ``wanted`` ((provider id,
    digests) per new notification) whose recipient the tenant suppressed for that provider."""
    by_digest = _by_digest(wanted)
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
    conn: AsyncConnection, box: SecretBox, done: Iterable[Completion], *, db: Database
) -> None:
    """Inside a completion's transaction: put the recipient of each of ``done`` (applied
    completions whose provider said the recipient is gone) on its tenant's list, unless it is
    on it already (under any configured key's digest). In digest order, as every writer of the
    list's unique index goes, so that two completions never wait on each other."""
    found = [
        (box.digests(recipient_key(c.leased.recipient)), c)
        for c in done
        if c.leased.recipient  # a lease handed back unread carries none (never gone)
    ]
    for digests, c in sorted(found, key=lambda pair: pair[0]):
        leased = c.leased
        if await _present(conn, leased.tenant_id, leased.provider_id, digests):
            continue
        row = {
            "tenant_id": leased.tenant_id,
            "provider_id": leased.provider_id,
            "digest": digests[0],
            "recipient": box.encrypt(leased.recipient),
            "reason": c.detail[:REASON_MAX],
            "source": "provider",
            "notification_id": leased.id,
            "created_at": c.ts,
        }
        await conn.execute(db.insert(S).on_conflict_do_nothing(), [row])


async def suppressed_of(
    conn: AsyncConnection, box: SecretBox, tenant_id: int, where: sa.ColumnElement[bool]
) -> list[int]:
    """The ids of the tenant's notifications ``where`` selects whose recipient the tenant
    suppressed for their provider; none is read when the tenant's list is empty. A recipient
    no key reads is not suppressed (it cannot be sent either)."""
    if not await conn.scalar(sa.select(sa.exists().where(S.c.tenant_id == tenant_id))):
        return []
    n = notifications.c
    query = sa.select(n.id, n.provider_id, n.recipient).where((n.tenant_id == tenant_id) & where)
    rows = list(await conn.execute(query))
    wanted: list[tuple[int, tuple[str, ...]]] = []
    ids: list[int] = []
    for notification_id, provider_id, sealed in rows:
        try:
            recipient = box.decrypt(sealed)
        except SecretUnreadable:
            continue
        wanted.append((provider_id, box.digests(recipient_key(recipient))))
        ids.append(notification_id)
    by_digest = _by_digest(wanted)
    gone: set[int] = set()
    keys = list(by_digest)
    for start in range(0, len(keys), _LOOKUP_CHUNK):
        query = sa.select(S.c.digest, S.c.provider_id).where(
            S.c.tenant_id == tenant_id, S.c.digest.in_(keys[start : start + _LOOKUP_CHUNK])
        )
        for row in await conn.execute(query):
            gone.update(i for i in by_digest[row.digest] if wanted[i][0] == row.provider_id)
    return sorted(ids[i] for i in gone)


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
        self._insert = db.insert

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
        by_key: dict[str, str] = {}  # one recipient, however often given: its first spelling
        for recipient in recipients:
            by_key.setdefault(recipient_key(recipient), recipient)
        given = list(by_key.values())
        digests = [self._box.digests(key) for key in by_key]
        flat = [d for per in digests for d in per]

        async def tx(conn: AsyncConnection) -> int:
            before = await _present(conn, tenant_id, provider_id, flat)
            new = [
                (r, per) for r, per in zip(given, digests, strict=True) if before.isdisjoint(per)
            ]
            sealed = self._box.encrypt_many([r for r, _ in new])
            fresh = [
                {
                    "tenant_id": tenant_id,
                    "provider_id": provider_id,
                    "digest": per[0],
                    "recipient": token,
                    "reason": reason[:REASON_MAX],
                    "source": "operator",
                    "notification_id": None,
                    "created_at": now,
                }
                for (_, per), token in zip(new, sealed, strict=True)
            ]
            if fresh:
                await conn.execute(self._insert(S).on_conflict_do_nothing(), fresh)
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

    async def suppress_queued(
        self, tenant_id: int, provider_id: int, recipients: Sequence[str], *, now: float
    ) -> int:
        """Suppress the tenant's queued notifications for the provider to ``recipients``
        (``_suppress_queued``); returns how many."""
        return await _suppress_queued(
            self._db, self._box, tenant_id, provider_id, recipients, now=now
        )

    async def remove_ids(
        self, tenant_id: int, ids: Sequence[int], *, now: float, actor: str
    ) -> int:
        """Take the tenant's entries ``ids`` off its list (others' ids are not its: left alone),
        audited; returns how many were."""

        async def tx(conn: AsyncConnection) -> int:
            where = (S.c.tenant_id == tenant_id) & S.c.id.in_(ids)
            removed = int((await conn.execute(S.delete().where(where))).rowcount)
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
        digests = self._box.digests(recipient_key(recipient))

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


async def _suppress_queued(
    db: Database,
    box: SecretBox,
    tenant_id: int,
    provider_id: int,
    recipients: Sequence[str],
    *,
    now: float,
) -> int:
    """Suppress the tenant's queued notifications for the provider whose recipient is one of
    ``recipients`` (in its usual form): finished ``suppressed``, never sent. Reads the queued
    ones a page at a time along the (tenant, state, id) index, each page read in a transaction
    of its own, and changes each page's finds while they are still queued (one a worker leased
    meanwhile is sent). Returns how many it suppressed."""
    wanted = {key for r in recipients for key in box.digests(recipient_key(r))}
    n = notifications.c
    queued = NotificationState.QUEUED.value
    page = (
        sa.select(n.id, n.recipient)
        .where(
            n.tenant_id == tenant_id,
            n.state == queued,
            n.id > sa.bindparam("after"),
            n.provider_id == provider_id,
        )
        .order_by(n.id)
        .limit(_SWEEP_PAGE)
    )
    change = (
        notifications.update()
        .where(
            n.tenant_id == tenant_id,
            n.state == queued,
            n.id.in_(sa.bindparam("ids", expanding=True)),
        )
        .values(state=SUPPRESSED, finished_at=now, last_error=SUPPRESSED_DETAIL)
    )
    done = after = 0

    async def one_page(conn: AsyncConnection) -> tuple[int, list[int]] | None:
        """The last id of the page after ``after`` and the ids on it to suppress."""
        rows = list(await conn.execute(page, {"after": after}))
        if not rows:
            return None
        found = []
        for row in rows:
            try:
                recipient = box.decrypt(row.recipient)
            except SecretUnreadable:  # no key opens it: it cannot be sent either
                continue
            if box.digest(recipient_key(recipient)) in wanted:
                found.append(row.id)
        return rows[-1].id, found

    async def suppress(conn: AsyncConnection) -> int:
        return int((await conn.execute(change, {"ids": found})).rowcount)

    # Read as a reader (a page is opened without holding SQLite's one writer); only a page
    # with finds is written, and only rows still queued change.
    while (read := await db.read(one_page)) is not None:
        after, found = read
        if found:
            done += await db.write(suppress)
    return done


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


def _by_digest(wanted: Sequence[tuple[int, Sequence[str]]]) -> dict[str, list[int]]:
    """The indexes of ``wanted`` ((provider id, digests) each) under each of their digests."""
    by_digest: dict[str, list[int]] = {}
    for index, (_, digests) in enumerate(wanted):
        for digest in digests:
            by_digest.setdefault(digest, []).append(index)
    return by_digest
