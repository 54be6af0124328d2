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

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Sequence
from importlib.resources import files
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

__all__ = ["SCRIPTS", "LuaCalls", "bounded"]

log = logging.getLogger(__name__)

SCRIPTS = ("reserve", "configure", "refund", "block", "levels")

Arg = int | str | bytes
_T = TypeVar("_T")


def _source(name: str) -> str:
    return (files("engine") / "redis_lua" / f"{name}.lua").read_text()


def script_text(name: str) -> str:
    """The script ``name`` as ``EVAL`` takes it: the shared helpers, then its body."""
    return _source("common") + "\n" + _source(name)


def library_text(library: str) -> str:
    """Every script as a function of one library named ``library``: the shared helpers once,
    then each body inside a function of ``(KEYS, ARGV)``, registered as ``<library>_<name>``."""
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
    are ``int``, ``str`` or ``bytes``. Every call is bounded by ``timeout_s`` (past it, the
    builtin ``TimeoutError``); ``aclose`` closes its connections.

    Uses the function library where the server has functions (found on the first call), else
    ``EVALSHA``. Raises the driver's errors (``RedisError`` and subclasses, ``OSError``).

    An ``FCALL`` skips redis-py's general command path (its argument packing, pool bookkeeping,
    retry and observability wrappers, and a task per write under a socket timeout: about half
    of a call's client time here): the function's name and keys are packed once per set of
    keys, and the command goes to a connection of this object's own (a lane: made like the
    client's, one per call under way, kept for the next), under this object's one timer. It
    keeps what that path guarantees: a call on a connection the server dropped is made once
    more on a fresh one, never after a timeout, and a connection left mid-reply (a timeout, a
    cancellation) is closed, never read out of step.
    """

    def __init__(self, client: Redis, *, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self.library = f"omnipost_{_digest()}"
        self._functions = {name: f"{self.library}_{name}" for name in SCRIPTS}
        self._scripts = {name: client.register_script(script_text(name)) for name in SCRIPTS}
        self._use_functions = True  # until the server shows it has none
        self._heads: dict[tuple[str, tuple[str, ...], int], bytes] = {}
        self._idle: list[AbstractConnection] = []
        self._lanes: list[AbstractConnection] = []

    @property
    def uses_functions(self) -> bool:
        return self._use_functions

    async def __call__(self, name: str, keys: Sequence[str], args: Sequence[Arg] = ()) -> Any:
        return await bounded(self._call(name, keys, args), self._timeout_s)

    async def aclose(self) -> None:
        """Close this object's connections (the client's own are its owner's to close)."""
        lanes, self._lanes, self._idle = self._lanes, [], []
        for conn in lanes:
            await conn.disconnect()

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
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
        command = self._head(name, keys, len(args)) + b"".join(_bulk(_encode(a)) for a in args)
        for retry in (False, True):
            conn = self._idle.pop() if self._idle else self._new_lane()
            try:
                await conn.send_packed_command(command, check_health=False)
                reply = await conn.read_response()
            except RedisConnectionError:
                await conn.disconnect()  # connects again when next used
                self._idle.append(conn)
                if retry:
                    raise
                continue
            except ResponseError:
                self._idle.append(conn)  # an error reply, read whole: the connection is fine
                raise
            except BaseException:
                await conn.disconnect(nowait=True)  # its reply may still be on the way
                self._idle.append(conn)
                raise
            self._idle.append(conn)
            return reply
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _new_lane(self) -> AbstractConnection:
        """A connection made as the client's pool makes its own, but without socket timeouts:
        this object's timer bounds every call instead (connecting included)."""
        pool = self._client.connection_pool
        kwargs = {**pool.connection_kwargs, "socket_timeout": None}
        kwargs.setdefault("socket_connect_timeout", self._timeout_s)
        conn: AbstractConnection = pool.connection_class(**kwargs)
        self._lanes.append(conn)
        return conn

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


async def bounded(command: Awaitable[_T], timeout_s: float) -> _T:
    """``command``'s result, or the builtin ``TimeoutError`` after ``timeout_s``: a hung Redis
    must not hold a send. Cancelling mid-reply is safe: redis-py drops that connection rather
    than reuse it out of step, and so do lanes."""
    try:
        async with asyncio.timeout(timeout_s):
            return await command
    except TimeoutError:  # the builtin one; redis-py's own is a RedisError
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None


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
