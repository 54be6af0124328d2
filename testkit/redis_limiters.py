"""Redis for the limiter's tests: the server the tests use, a fresh key prefix each and its
cleanup, limiters made on it, one that cannot reach it, and what its commands look like."""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from engine.core.domain import BucketKey
from engine.limits.redis_limiter import RedisLimiter
from testkit.support import missing

REDIS_URL = os.environ.get("OMNIPOST_TEST_REDIS", "redis://127.0.0.1:6379/0")


async def redis_client_or_skip() -> Redis:
    """A client to the test server; skips (fails under CI) when it does not answer."""
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=1.0)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        missing(f"Redis is not reachable at {REDIS_URL}: {exc}")
    return client


async def delete_prefix(client: Redis, prefix: str) -> None:
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await client.delete(*keys)


def new_prefix() -> str:
    return f"omnipost-test-{uuid.uuid4().hex[:12]}"


TENANT, PROVIDER, PAIR = SEND = BucketKey.for_send("acme", "mailgun")


UNREACHABLE = "redis://127.0.0.1:1/0"


Make = Callable[..., Awaitable[RedisLimiter]]


def lanes(
    monkeypatch: pytest.MonkeyPatch, limiter: RedisLimiter, hook: Callable[[Any], None]
) -> list[Any]:
    """The connections this limiter's Lua calls use from now on (the idle ones dropped), each
    passed to ``hook`` when made."""
    calls = limiter._calls
    real = calls._new_lane
    made: list[Any] = []

    def new_lane() -> Any:
        conn = real()
        hook(conn)
        made.append(conn)
        return conn

    calls._idle.clear()  # still in calls._lanes, closed with the limiter
    monkeypatch.setattr(calls, "_new_lane", new_lane)
    return made


def is_fcall(command: Any) -> bool:
    """Whether a packed command is a Lua call (not one of the connection's own handshake)."""
    return isinstance(command, bytes) and b"FCALL" in command


def unreachable(monkeypatch: pytest.MonkeyPatch, limiter: RedisLimiter) -> None:
    """This limiter's Redis refuses it from now on (``monkeypatch.undo`` to let it back); the
    data stays, as across a network cut or a paused server."""

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("connection refused (simulated)")

    # the pool, where redis-py's commands get their connections, and the Lua calls' own
    # (single calls, and the batches' pipelines)
    monkeypatch.setattr(limiter._client.connection_pool, "get_connection", refused)
    monkeypatch.setattr(limiter._calls, "_fcall", refused)
    monkeypatch.setattr(limiter._calls, "_on_lane", refused)
