"""Held connections for the Postgres hot path (``Database.write_on_driver(..., lane=...)``).

The dispatcher's claims and the completer's acknowledgements each keep a connection of their
own rather than checking one out of the pool per statement. A lane must reuse its connection,
heal when the server ends it, never run two statements on it at once, and let it go on close.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from engine import SecretBox
from engine.store import Store

pytestmark = pytest.mark.postgres


async def backend_pid(driver: Any) -> int:
    return int(await driver.fetchval("SELECT pg_backend_pid()"))


async def slow_pid(driver: Any) -> int:
    await driver.execute("SELECT pg_sleep(0.2)")
    return await backend_pid(driver)


async def admin(pg_url: str) -> Any:
    return await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))


async def test_a_lane_keeps_its_connection_and_heals_when_the_server_ends_it(
    pg_url: str, box: SecretBox
) -> None:
    async with Store(pg_url, box) as store:
        db = store.queue._db
        first = await db.write_on_driver(backend_pid, lane="claim")
        assert await db.write_on_driver(backend_pid, lane="claim") == first
        assert await db.write_on_driver(backend_pid, lane="deliver") != first
        conn = await admin(pg_url)
        try:
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await conn.close()
        await asyncio.sleep(0.05)
        healed = await db.write_on_driver(backend_pid, lane="claim")  # no error reaches here
        assert healed != first
        assert await db.write_on_driver(backend_pid, lane="claim") == healed


async def test_a_busy_lane_sends_the_other_caller_through_the_pool(
    pg_url: str, box: SecretBox
) -> None:
    async with Store(pg_url, box) as store:
        db = store.queue._db
        held = await db.write_on_driver(backend_pid, lane="claim")
        both = await asyncio.gather(
            db.write_on_driver(slow_pid, lane="claim"), db.write_on_driver(slow_pid, lane="claim")
        )
        assert held in both and len(set(both)) == 2, "one statement at a time on the lane"


async def test_closing_the_store_lets_the_lanes_connections_go(pg_url: str, box: SecretBox) -> None:
    async with Store(pg_url, box) as store:
        db = store.queue._db
        pids = {await db.write_on_driver(backend_pid, lane=name) for name in ("claim", "deliver")}
    database = make_url(pg_url).database
    conn = await admin(pg_url)
    try:
        for _ in range(50):  # the server notices the closed sockets within moments
            rows = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid = ANY($2::int[])",
                database,
                list(pids),
            )
            if not rows:
                break
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    assert not rows, "a lane's connection outlived the store"
