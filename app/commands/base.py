"""What every command shares: an engine on the run's store, acting as this user."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from app.session import Context, actor
from app.wiring import build_engine, build_store
from engine import Engine

__all__ = ["open_engine", "reading_engine"]


@contextlib.asynccontextmanager
async def open_engine(
    ctx: Context,
    *,
    concurrency: int = 16,
    lease_s: float = 30.0,
    prefetch: int | None = None,
    redis_url: str | None = None,
    webhooks_disabled_after_s: float | None = None,
) -> AsyncIterator[Engine]:
    """An opened engine on ``ctx``'s store (not dispatching until started), closed after."""
    async with build_store(ctx.db_url, ctx.box) as store:
        engine = build_engine(
            store,
            concurrency=concurrency,
            lease_s=lease_s,
            prefetch=prefetch,
            actor=actor("cli"),
            redis_url=redis_url,
            webhooks_disabled_after_s=webhooks_disabled_after_s,
        )
        async with engine:
            yield engine


@contextlib.asynccontextmanager
async def reading_engine(ctx: Context) -> AsyncIterator[Engine]:
    """An engine on ``ctx``'s store that is not opened, for commands that only read the
    configuration: opening builds every provider, which needs the keys that open their
    secrets, and reading tenants or limits has never needed those."""
    async with build_store(ctx.db_url, ctx.box) as store:
        await store.ensure_current()
        yield build_engine(store, actor=actor("cli"))
