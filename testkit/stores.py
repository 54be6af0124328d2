"""Stores for the tests: the two backends a store contract runs on, a fresh Postgres database
and its drop (a skip with the reason when no server answers, a failure under CI), and the type
of the fixture that builds engines."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy.engine import make_url

from engine import Engine

__all__ = [
    "BACKENDS",
    "IN_CI",
    "PG_ADMIN_URL",
    "EngineFactory",
    "drop_pg_database",
    "make_pg_database",
    "postgres_or_skip",
]

PG_ADMIN_URL = os.environ.get("OMNIPOST_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = bool(os.environ.get("CI"))
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


async def _pg_admin(sql: str) -> None:
    import asyncpg

    url = make_url(PG_ADMIN_URL)
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database, timeout=5
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def postgres_or_skip() -> None:
    try:
        asyncio.run(_pg_admin("SELECT 1"))
    except (TimeoutError, OSError, ImportError) as exc:
        reason = f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}"
        if IN_CI:
            pytest.fail(f"{reason} (CI is set, so this fails instead of skipping)")
        pytest.skip(reason)


def make_pg_database() -> str:
    """Create a fresh database; returns its URL. The caller drops it with drop_pg_database."""
    postgres_or_skip()
    name = f"omnipost_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


EngineFactory = Callable[..., Awaitable[Engine]]
