"""How the Redis limiter's Lua runs on a server: ``LuaCalls``.

The scripts in ``engine/redis_lua/`` (each after ``common.lua``) are loaded once as one Redis
function library and called with ``FCALL`` on Redis 7 and later: the shared helpers are then
defined once per load, not on every call as an ``EVALSHA`` script's would be, which took about
a quarter of a reservation's time on the server. The library's name carries a digest of its
text (``omnipost_<digest>``), and so does every function's, so processes of two OmniPost
versions on one Redis each call their own. Older libraries stay loaded (a few kilobytes each)
until someone deletes them (``FUNCTION DELETE``).

A server that lost the library (restarted, ``FUNCTION FLUSH``, a failover to a replica that
never had it) answers "Function not found"; the library is loaded again and the call made once
more. A server without functions (Redis 6), or one whose ACL refuses ``FCALL`` or ``FUNCTION
LOAD``, gets the same Lua as ``EVALSHA`` scripts, which redis-py loads again after ``NOSCRIPT``.

Errors are the driver's: the limiter treats them all as Redis being unavailable.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

__all__ = ["SCRIPTS", "LuaCalls"]

log = logging.getLogger(__name__)

SCRIPTS = ("reserve", "configure", "refund", "block", "levels")

Arg = int | str | bytes


def _source(name: str) -> str:
    return (files("engine") / "redis_lua" / f"{name}.lua").read_text()


def script_text(name: str) -> str:
    """The script ``name`` as ``EVAL`` takes it: the shared helpers, then its body."""
    return _source("common") + "\n" + _source(name)


def library_text(library: str) -> str:
    """Every script as a function of one library named ``library``: the shared helpers once,
    then each body inside a function of ``(KEYS, ARGV)``, registered as ``LIBRARY_NAME``."""
    parts = [f"#!lua name={library}", _source("common")]
    for name in SCRIPTS:
        parts.append(f"local function {name}(KEYS, ARGV)\n{_source(name)}\nend")
        parts.append(f"redis.register_function('{library}_{name}', {name})")
    return "\n".join(parts) + "\n"


def _digest() -> str:
    text = "\n".join(_source(name) for name in ("common", *SCRIPTS))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


class LuaCalls:
    """Runs the limiter's scripts on ``client``: ``await calls(name, keys, args)``; ``args``
    are ``int``, ``str`` or ``bytes``.

    Uses the function library where the server has functions (found on the first call), else
    ``EVALSHA``. Raises the driver's errors (``RedisError`` and subclasses, ``OSError``).

    An ``FCALL`` skips redis-py's general command path (packing every argument, retry and
    observability wrappers: about 40 us a call here, as much as the call itself): the
    function's name and keys are packed once per set of keys, and the command goes straight to
    a connection of the client's pool. It keeps what that path guarantees: a pooled connection
    the server dropped is retried once on a fresh one, never after a timeout (the client's
    socket timeouts apply), and a connection left mid-reply (an error, a cancellation) is
    closed, never reused out of step. A client with ``single_connection_client`` takes the
    general path.
    """

    def __init__(self, client: Redis) -> None:
        self._client = client
        self.library = f"omnipost_{_digest()}"
        self._functions = {name: f"{self.library}_{name}" for name in SCRIPTS}
        self._scripts = {name: client.register_script(script_text(name)) for name in SCRIPTS}
        self._use_functions = True  # until the server shows it has none
        self._heads: dict[tuple[str, tuple[str, ...], int], bytes] = {}

    @property
    def uses_functions(self) -> bool:
        return self._use_functions

    async def __call__(self, name: str, keys: Sequence[str], args: Sequence[Arg] = ()) -> Any:
        if self._use_functions:
            try:
                return await self._fcall(name, keys, args)
            except ResponseError as exc:
                if not _not_loaded(exc):
                    raise
            await self._load()
            if self._use_functions:
                return await self._fcall(name, keys, args)
        return await self._scripts[name](keys=keys, args=args)

    async def _load(self) -> None:
        """Load the library; on a server that cannot, use scripts from now on."""
        try:
            await self._client.function_load(library_text(self.library))
        except ResponseError as exc:
            if "already exists" in str(exc):
                return  # another process (or task) has just loaded it
            log.info("Redis cannot load the limiter's functions (%s); using scripts.", exc)
            self._use_functions = False

    async def _fcall(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        if self._client.single_connection_client:
            return await self._client.fcall(self._functions[name], len(keys), *keys, *args)
        command = self._head(name, keys, len(args)) + b"".join(_bulk(_encode(a)) for a in args)
        pool = self._client.connection_pool
        get_connection = cast(Callable[[], Awaitable[AbstractConnection]], pool.get_connection)
        for retry in (False, True):
            conn = await get_connection()
            try:
                await conn.send_packed_command(command, check_health=False)
                return await conn.read_response()
            except RedisConnectionError:
                await conn.disconnect()
                if retry:
                    raise
            except BaseException:
                await conn.disconnect(nowait=True)
                raise
            finally:
                await pool.release(conn)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _head(self, name: str, keys: Sequence[str], n_args: int) -> bytes:
        """``FCALL``, the function and its keys in the wire format, for ``n_args`` more."""
        cache_key = (name, keys if isinstance(keys, tuple) else tuple(keys), n_args)
        head = self._heads.get(cache_key)
        if head is None:
            parts = [b"FCALL", self._functions[name].encode(), b"%d" % len(keys)]
            parts += [key.encode() for key in keys]
            head = b"*%d\r\n" % (len(parts) + n_args) + b"".join(map(_bulk, parts))
            if len(self._heads) >= 4096:  # the same few sets of keys, but never unbounded
                self._heads.clear()
            self._heads[cache_key] = head
        return head


def _encode(value: Arg) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, int):
        return b"%d" % value
    return value.encode()


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _not_loaded(exc: ResponseError) -> bool:
    """True when the server lacks the function (lost it, or never had functions at all)."""
    text = str(exc)
    return any(sign in text for sign in ("Function not found", "unknown command", "no permissions"))
