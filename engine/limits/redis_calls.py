"""How the Redis limiter's Lua runs on a server: ``LuaCalls``.

The scripts in ``engine/limits/redis_lua/`` (each after ``common.lua``) are loaded once as one Redis
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

``many`` sends several calls of one function in one round trip (a pipeline: written at once,
the replies read in order, each within the timeout of the one before), each reply or error
reply returned in its place; on a server without functions, a redis-py pipeline of ``EVALSHA``
(which first asks whether the scripts are loaded: two round trips there).

Errors are the driver's: the limiter treats them all as Redis being unavailable (``UNAVAILABLE``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Sequence
from importlib.resources import files
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

__all__ = [
    "LATE",
    "LATE_LOOP_S",
    "SCRIPTS",
    "UNAVAILABLE",
    "Bound",
    "LateLoop",
    "LuaCalls",
    "bounded",
]

log = logging.getLogger(__name__)

SCRIPTS = ("reserve", "configure", "block", "levels", "batch")

# RedisError covers ConnectionError and TimeoutError, and also READONLY after a failover or
# LOADING after a restart: in every case Redis cannot enforce the limits right now. The builtin
# TimeoutError (an OSError, named for clarity) is a command past ``call_timeout_s``: a hung Redis.
UNAVAILABLE = (RedisError, TimeoutError, OSError)

Arg = int | str | bytes
_T = TypeVar("_T")


def _source(name: str) -> str:
    return (files("engine.limits") / "redis_lua" / f"{name}.lua").read_text()


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

    async def many(
        self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        """Each ``(keys, args)`` of ``calls`` as a call of ``name``, all in one round trip,
        run by the server one after another in that order. Each is a command with
        ``timeout_s`` to answer, as a single call: the write has ``timeout_s``, and then each
        reply ``timeout_s`` after the one before (a long batch on a healthy server takes as
        long as it takes; a hung one is left ``timeout_s`` after its last answer). Returns the
        replies in that order, an error reply as its ``ResponseError`` (not raised), and so
        is a failure once some replies are in, for each still to come; a failure before any
        reply is raised (the driver's errors, as a single call's)."""
        if not calls:
            return []
        return await self._many(name, calls)

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

    async def _many(
        self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        if self._use_functions:
            todo = await self._fcalls(name, calls, todo, replies)
            if todo:  # the server lacks the library: load it, and send those again
                await bounded(self._load(), self._timeout_s)
                if self._use_functions:
                    await self._fcalls(name, calls, todo, replies)
                    return replies
        if todo:
            pipe = self._client.pipeline(transaction=False)
            for i in todo:
                keys, args = calls[i]
                await self._scripts[name](keys=keys, args=args, client=pipe)
            done = await bounded(pipe.execute(raise_on_error=False), self._timeout_s * len(todo))
            for i, reply in zip(todo, done, strict=True):
                replies[i] = reply
        return replies

    async def _fcalls(
        self,
        name: str,
        calls: Sequence[tuple[Sequence[str], Sequence[Arg]]],
        todo: list[int],
        replies: list[Any],
    ) -> list[int]:
        """Send the calls numbered ``todo`` on one lane, at once; put their replies in
        ``replies``, and return those the server had no function for."""
        command = b"".join(self._packed(name, *calls[i]) for i in todo)
        got = await self._on_lane(command, len(todo), step_s=self._timeout_s)
        for i, reply in zip(todo, got, strict=True):
            replies[i] = reply
        return [i for i in todo if _lost_function(replies[i])]

    def _packed(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> bytes:
        """``FCALL name`` over ``keys`` and ``args`` in the wire format (not kept: a batch's
        keys are seldom the same twice)."""
        parts = [b"FCALL", self._functions[name].encode(), b"%d" % len(keys)]
        parts += [key.encode() for key in keys]
        parts += [_encode(a) for a in args]
        return b"*%d\r\n" % len(parts) + b"".join(map(_bulk, parts))

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
        [reply] = await self._on_lane(command, 1)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def _on_lane(
        self, command: bytes, replies: int, *, step_s: float | None = None
    ) -> list[Any]:
        """Send ``command`` (``replies`` commands packed) on a lane and read their replies, an
        error reply as its ``ResponseError``; with ``step_s``, the write (connecting too) and
        then each reply within that many seconds (else the caller bounds the whole). A failure
        once some replies are in (a timeout, a dropped connection) takes the place of each
        reply still to come: the commands answered ran, and are never sent again."""
        for retry in (False, True):
            conn = self._idle.pop() if self._idle else self._new_lane()
            out: list[Any] = []
            try:
                if step_s is None:
                    await conn.send_packed_command(command, check_health=False)
                    while len(out) < replies:
                        out.append(await _reply(conn))
                else:
                    async with Bound(step_s) as bound:
                        await conn.send_packed_command(command, check_health=False)
                        while len(out) < replies:
                            bound.renew()
                            out.append(await _reply(conn))
            except RedisConnectionError as exc:
                await conn.disconnect()  # connects again when next used
                self._idle.append(conn)
                if out:
                    return out + [exc] * (replies - len(out))
                if retry:
                    raise
                continue
            except BaseException as exc:
                await conn.disconnect(nowait=True)  # its reply may still be on the way
                self._idle.append(conn)
                if out and isinstance(exc, Exception):
                    return out + [exc] * (replies - len(out))
                raise
            self._idle.append(conn)  # error replies too were read whole: the connection is fine
            return out
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


# A timer this late (or later) found a loop that was not reading its sockets: the answer may
# be there, unread. Such a deadline is moved on rather than taken as Redis's silence.
LATE_LOOP_S = 0.05
_MOST_LATE_FACTOR = 20  # a loop late at every deadline still gives up after this many timeouts


class LateLoop:
    """How often (and how late, at most) this process's event loop held a Redis call past its
    deadline: a late loop, not a silent Redis (``bounded``). Logged at most every 10 s."""

    def __init__(self) -> None:
        self.count = 0
        self.worst_s = 0.0
        self._logged_at = -1e9

    def saw(self, late_s: float, now: float) -> None:
        self.count += 1
        self.worst_s = late_s if late_s > self.worst_s else self.worst_s
        if now - self._logged_at >= 10.0:
            self._logged_at = now
            log.warning(
                "this worker's event loop was %.2f s late for a Redis call's deadline (%d times"
                " so far, %.2f s at worst): a busy process, not Redis; the answer is waited for"
                " and the shared limits stay in use.",
                late_s,
                self.count,
                self.worst_s,
            )


LATE = LateLoop()


async def bounded(command: Awaitable[_T], timeout_s: float) -> _T:
    """``command``'s result, or the builtin ``TimeoutError`` once Redis has had ``timeout_s``
    to answer (``Bound``): a hung Redis must not hold a send, and a late loop is not Redis's
    silence. Cancelling mid-reply is safe: redis-py drops that connection rather than reuse it
    out of step, and so do lanes."""
    async with Bound(timeout_s):
        return await command


class Bound:
    """``async with Bound(timeout_s) as bound``: the block is cancelled, and the builtin
    ``TimeoutError`` raised, once ``timeout_s`` passed with no ``bound.renew()`` (an answer
    came in: ``timeout_s`` again from now). Those seconds count only while this process's
    loop could read the answer: a deadline whose timer runs late (the loop was busy elsewhere,
    by ``LATE_LOOP_S`` or more) is moved on by a grace of a tenth of the timeout instead,
    since the answer may be in the socket, unread; so a late loop is never taken for an
    outage (at most ``_MOST_LATE_FACTOR`` times ``timeout_s`` past the last renewal). One timer
    for a whole batch of replies, where a timer per reply cost as much as reading it."""

    __slots__ = ("_due", "_give_up", "_grace_s", "_handle", "_loop", "_timeout_s", "_timer")

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._grace_s = timeout_s / 10 if timeout_s / 10 > LATE_LOOP_S else LATE_LOOP_S

    async def __aenter__(self) -> Bound:
        self._loop = asyncio.get_running_loop()
        self._timer = asyncio.timeout(None)
        await self._timer.__aenter__()
        self.renew()
        self._handle = self._loop.call_at(self._due, self._expire)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._handle.cancel()
        try:
            await self._timer.__aexit__(kind, exc, tb)
        except TimeoutError:
            if not self._timer.expired():
                raise
            raise TimeoutError(
                f"no answer within {self._timeout_s:g} s, while this worker's loop was on time"
            ) from None

    def renew(self) -> None:
        """An answer came in: the next has ``timeout_s`` from now."""
        now = self._loop.time()
        self._due = now + self._timeout_s
        self._give_up = now + self._timeout_s * _MOST_LATE_FACTOR

    def _expire(self) -> None:
        now = self._loop.time()
        if now < self._due:  # renewed since this timer was set
            self._handle = self._loop.call_at(self._due, self._expire)
            return
        late_s = now - self._due
        if late_s >= LATE_LOOP_S and now < self._give_up:
            LATE.saw(late_s, now)
            self._due = now + self._grace_s
            self._handle = self._loop.call_at(self._due, self._expire)
            return
        self._timer.reschedule(now)  # expires: the block is cancelled


async def _reply(conn: AbstractConnection) -> Any:
    """The next reply on ``conn``; an error reply returned, not raised."""
    try:
        return await conn.read_response()
    except ResponseError as exc:
        return exc


def _lost_function(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and _not_loaded(reply)


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
