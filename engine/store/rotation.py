"""Key rotation in the store: every stored secret re-encrypted under the newest key, so that
the older keys can be retired.

Five columns hold ``SecretBox`` tokens: ``notifications.recipient`` (every state),
``providers.secrets``, ``event_endpoints.secret`` and ``old_secret`` (status events' signing
secrets) and ``suppressions.recipient``, whose row also holds the recipient's keyed digest
(``SecretBox.digest``), recomputed under the newest key with it; the delivery and audit
logs hold none (the audit log names secrets, never their values). Each is walked by primary
key in batches (keyset pagination: bounded memory, no offset scans), each batch read in one
short transaction and written in another, so SQLite's one write lock is never held long and a
Postgres transaction never grows. An interrupted walk loses at most the batch under way, and a
second one finds nothing left to do.

A row is rewritten only when its token is not under the newest key (or is in the earlier
Fernet format, which is rewritten in the current one), by a compare-and-set on
that token: only the token's column is set, so a worker that changed the row's state meanwhile
keeps its change; a row deleted meanwhile is skipped; another rotator's rewrite makes this one
a no-op. A token is a safe version to compare with: a recipient never changes, and a
provider's or an endpoint's secrets change only as a whole new token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.core.crypto import SecretBox
from engine.core.domain import recipient_key
from engine.core.errors import OmniPostError
from engine.store.database import Database
from engine.store.schema import (
    event_endpoints,
    notifications,
    providers,
    suppressions,
    tenants,
)

__all__ = ["RotationProgress", "RotationRepo", "RotationReport", "TableRotation"]


@dataclass(frozen=True, slots=True)
class TableRotation:
    """One table's walk: rows holding a token that were ``checked``, those ``rewritten`` under
    the newest key (on a dry run: that would be), and those no configured key reads."""

    table: str
    checked: int = 0
    rewritten: int = 0
    unreadable: int = 0


@dataclass(frozen=True, slots=True)
class RotationProgress:
    """Where a walk is: ``phase`` is ``check`` (reads only) or ``rewrite``."""

    phase: str
    table: str
    checked: int
    rewritten: int


@dataclass(frozen=True, slots=True)
class RotationReport:
    """What a rotation (or, with ``dry_run``, a check) found, table by table. ``problem`` is
    the sentence naming the first row no configured key reads, or None when every row reads."""

    tables: tuple[TableRotation, ...]
    dry_run: bool
    keys: int
    problem: str | None = None

    @property
    def checked(self) -> int:
        return sum(t.checked for t in self.tables)

    @property
    def rewritten(self) -> int:
        return sum(t.rewritten for t in self.tables)

    @property
    def unreadable(self) -> int:
        return sum(t.unreadable for t in self.tables)


@dataclass(frozen=True, slots=True)
class _Column:
    """A column of tokens; ``owner`` is what names a row in a message (tenant id or name)."""

    table: sa.Table
    token: sa.Column[Any]
    owner: sa.Column[Any]
    digest: sa.Column[Any] | None = None  # the token's plaintext's digest, kept in step
    label: str = ""  # how a report names it, when not by its table's name


_COLUMNS = (
    _Column(notifications, notifications.c.recipient, notifications.c.tenant_id),
    _Column(providers, providers.c.secrets, providers.c.name),
    _Column(
        suppressions, suppressions.c.recipient, suppressions.c.tenant_id, suppressions.c.digest
    ),
    # Status events' signing secrets, and the ones still signing during a rotation.
    _Column(event_endpoints, event_endpoints.c.secret, event_endpoints.c.tenant_id),
    _Column(
        event_endpoints,
        event_endpoints.c.old_secret,
        event_endpoints.c.tenant_id,
        label="event_endpoints (old secrets)",
    ),
)

Progress = Callable[[RotationProgress], None]


class RotationRepo:
    """Walks every token column; ``batch`` rows per transaction."""

    def __init__(self, db: Database, box: SecretBox, *, batch: int = 500) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self._db = db
        self._box = box
        self.batch = batch

    def batched(self, batch: int) -> RotationRepo:
        """The same walker, ``batch`` rows per transaction."""
        return RotationRepo(self._db, self._box, batch=batch)

    async def walk(self, *, rewrite: bool, progress: Progress | None = None) -> RotationReport:
        """Check every token (``rewrite=False``: reads only) or rewrite every one not under the
        newest key. A check counts the rows no key reads and names the first in ``problem``.
        A rewrite raises OmniPostError at a batch holding such a row, writing none of that
        batch (the batches before it are committed and valid under the newest key)."""
        tables: list[TableRotation] = []
        first: str | None = None
        for column in _COLUMNS:
            done, unreadable = await self._walk(column, rewrite=rewrite, progress=progress)
            tables.append(done)
            if first is None and unreadable is not None:
                first = await self._describe(column, unreadable)
        report = RotationReport(tuple(tables), dry_run=not rewrite, keys=self._box.key_count)
        if first is None:
            return report
        return replace(report, problem=self._sentence(first, report.unreadable))

    def _sentence(self, first: str, count: int, *, partly: bool = False) -> str:
        """One sentence naming ``first`` (and how many more of ``count``) and the keys tried."""
        others = count - 1
        also = f" and {others} other row{'s' if others != 1 else ''}" if others else ""
        keys = self._box.describe_keys()
        which = keys if self._box.key_count == 1 else f"any of {keys}"
        done = (
            "rows before it are already under the newest key" if partly else "nothing was rewritten"
        )
        return (
            f"{first}{also} cannot be read with {which}; "
            f"add the key that wrote {'it' if not others else 'them'} and run again ({done})."
        )

    async def _walk(
        self, column: _Column, *, rewrite: bool, progress: Progress | None
    ) -> tuple[TableRotation, tuple[Any, ...] | None]:
        """One column, batch by batch; returns its counts and its first unreadable row."""
        done = TableRotation(column.label or column.table.name)
        first: tuple[Any, ...] | None = None
        after = 0
        while rows := await self._db.read(_page(column, after, self.batch)):
            after = rows[-1][0]
            fresh, unreadable = self._sort(column, rows, rewrite=rewrite)
            if unreadable and rewrite:
                # Appeared since the check (another process writing with a key not here).
                what = await self._describe(column, unreadable[0])
                raise OmniPostError(self._sentence(what, len(unreadable), partly=True))
            first = first or (unreadable[0] if unreadable else None)
            written = len(fresh)
            if rewrite and fresh:
                written = await self._db.write(_rewrite(column, fresh))
            done = replace(
                done,
                checked=done.checked + len(rows),
                rewritten=done.rewritten + written,
                unreadable=done.unreadable + len(unreadable),
            )
            if progress is not None:
                phase = "rewrite" if rewrite else "check"
                progress(RotationProgress(phase, done.table, done.checked, done.rewritten))
        return done, first

    def _sort(
        self, column: _Column, rows: Sequence[tuple[Any, ...]], *, rewrite: bool
    ) -> tuple[dict[int, tuple[str, str, str]], list[tuple[Any, ...]]]:
        """The rows to rewrite (id -> (old token, new token, the plaintext's digest under the
        newest key); on a check the new token is the old) and the rows no key reads. Rows
        already under the newest key are neither."""
        fresh: dict[int, tuple[str, str, str]] = {}
        unreadable = []
        for row in rows:
            row_id, _, token = row
            if self._box.is_current(token):
                continue
            try:
                plain = self._box.decrypt(token)
            except OmniPostError:
                unreadable.append(row)
                continue
            new = self._box.encrypt(plain) if rewrite else token
            digest = self._box.digest(recipient_key(plain)) if column.digest is not None else ""
            fresh[row_id] = (token, new, digest)
        return fresh, unreadable

    async def _describe(self, column: _Column, row: tuple[Any, ...]) -> str:
        """``notification 12 (tenant acme)`` or ``the secrets of provider sms``."""
        row_id, owner, _ = row
        if column.table is providers:
            return f"the secrets of provider {owner}"
        if column.table is event_endpoints:
            return f"the signing secret of webhook {row_id}"

        async def tx(conn: AsyncConnection) -> str | None:
            query = sa.select(tenants.c.name).where(tenants.c.id == owner)
            return (await conn.execute(query)).scalar()

        name = await self._db.read(tx)
        return f"notification {row_id} (tenant {name or owner})"


def _page(
    column: _Column, after: int, limit: int
) -> Callable[[AsyncConnection], Awaitable[list[tuple[Any, ...]]]]:
    """The next ``limit`` rows holding a token after the id ``after``, in id order, as
    (id, owner, token)."""
    table = column.table
    query = (
        sa.select(table.c.id, column.owner, column.token)
        .where((table.c.id > after) & column.token.is_not(None))
        .order_by(table.c.id)
        .limit(limit)
    )

    async def tx(conn: AsyncConnection) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in await conn.execute(query)]

    return tx


def _rewrite(
    column: _Column, fresh: dict[int, tuple[str, str, str]]
) -> Callable[[AsyncConnection], Awaitable[int]]:
    """One statement for a batch (``fresh`` not empty): each row's token set to its new one
    (and its digest, on a column that has one) where the row still holds the old one, a
    compare-and-set. ``id IN (...)`` lets both databases find the rows by primary key. Returns
    how many rows it rewrote."""
    table = column.table
    old = sa.case({i: tokens[0] for i, tokens in fresh.items()}, value=table.c.id)
    new = sa.case({i: tokens[1] for i, tokens in fresh.items()}, value=table.c.id)
    values: dict[str, Any] = {column.token.name: new}
    if column.digest is not None:
        digests = {i: tokens[2] for i, tokens in fresh.items()}
        values[column.digest.name] = sa.case(digests, value=table.c.id)
    stmt = table.update().where(table.c.id.in_(list(fresh)) & (column.token == old)).values(values)

    async def tx(conn: AsyncConnection) -> int:
        return int((await conn.execute(stmt)).rowcount)

    return tx
