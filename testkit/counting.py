"""What a snapshot costs: a limiter that counts the bucket levels it hands out, a counter of
the SQL statements a store runs, and an engine over many tenants to measure them on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from engine import (
    BUILTIN_KINDS,
    BucketKey,
    BucketLevel,
    Engine,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)
from testkit.many_tenants import populate


class CountingLimiter:
    """A ``LocalLimiter`` that counts the bucket levels it hands out (with ``levels(keys)``:
    the cost the engine asks for)."""

    def __init__(self, inner: LocalLimiter) -> None:
        self.inner = inner
        self.levels_read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def levels(self, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        found = await self.inner.levels()
        if keys is not None:
            wanted = set(keys)
            found = [level for level in found if level.key in wanted]
        self.levels_read += len(found)
        return found


class Statements:
    """Counts the SQL statements a store runs."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        sync = store._db.engine.sync_engine
        sa.event.listen(sync, "after_cursor_execute", self._one)

    def _one(self, *_args: object) -> None:
        self.count += 1


async def populated_engine(folder: Path, tenants: int) -> tuple[Engine, CountingLimiter, Store]:
    box = SecretBox([SecretBox.generate_key()])
    url = f"sqlite:///{folder / f'view-{tenants}.db'}"
    store = Store(url, box)
    await store.migrate()
    limiter = CountingLimiter(LocalLimiter(SystemClock()))
    engine = Engine(store, limiter, BUILTIN_KINDS)
    await engine.open()
    await populate(engine, url, tenants, queued=2, token=box.encrypt("a@example.com"))
    return engine, limiter, store
