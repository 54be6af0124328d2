"""The Redis ``Limiter``: token buckets shared by every worker process on one Redis server.

Each operation is one Lua script (``engine/redis_lua/``), so it is atomic across processes: a
reservation reads, refills and debits every bucket of a send at once, on Redis's clock
(``TIME`` inside the script; a clock stepped back mints nothing). Limits live in Redis too, so
``configure`` from any process reaches all of them. Fractions of a token leave Lua as strings.

Keys, under ``prefix``: a tenant's and its pairs' buckets share the hash tag ``{t:TENANT}``, a
provider's has ``{p:PROVIDER}``; there are also a set of configured buckets and a seed marker.
A send's script touches a tenant's and a provider's keys, which hash to different slots, so
Redis Cluster refuses it (CROSSSLOT): a single node, or a primary behind Sentinel, is supported.

When Redis is unreachable the limiter says so once, at WARNING, and falls back to an
in-process ``LocalLimiter`` over the limits it remembers, each divided by ``fallback_workers()``
(the live worker count, so all workers together stay near the shared limit) and starting
empty. It probes Redis at most every ``probe_s`` and returns to it when it answers, pushing any
limits configured in the meantime; the first process back holds every bucket empty for
``probe_s``, while the others may still spend their local shares. Every process must use the
same ``probe_s``. Driver errors never leave this class.

A Redis that hangs (paused, or stuck on the network) rather than refusing counts as unreachable
too: every command has ``call_timeout_s`` to answer, is not retried after a timeout, and then
the limiter falls back and probes as above. A command that timed out may still run once Redis
wakes up; at worst that spends tokens nobody used, never grants more.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from engine.clock import Clock
from engine.domain import BucketKey, BucketLevel, BucketScope, Limit
from engine.errors import ConfigError
from engine.limiter import Reservation
from engine.local_limiter import LocalLimiter

__all__ = ["RedisLimiter"]

log = logging.getLogger(__name__)

# RedisError covers ConnectionError and TimeoutError, and also READONLY after a failover or
# LOADING after a restart: in every case Redis cannot enforce the limits right now. The builtin
# TimeoutError (an OSError, named for clarity) is a command past ``call_timeout_s``: a hung Redis.
_UNAVAILABLE = (RedisError, TimeoutError, OSError)
_SCRIPTS = ("reserve", "configure", "refund", "block", "levels")

_T = TypeVar("_T")


def _lua(name: str) -> str:
    folder = files("engine") / "redis_lua"
    return (folder / "common.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


def _client_for(url: str) -> Redis:
    """A client that gives up fast (the fallback takes over) and retries once, for a pooled
    connection the server has dropped, but never after a timeout: a Redis that did not answer
    once will not answer a retry in time either. Its socket timeouts only back up the limiter's
    own ``call_timeout_s``. Raises ``ConfigError`` for a URL it cannot use."""
    retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    try:
        return Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0, retry=retry)
    except ValueError as exc:
        raise ConfigError(f"cannot use that Redis URL: {exc}") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _share(limit: Limit, workers: int) -> Limit:
    """One worker's part of ``limit`` when ``workers`` enforce it apart from each other."""
    return Limit(limit.rate_per_s / workers, max(1.0, limit.burst / workers))


class RedisLimiter:
    """A ``Limiter`` over Redis, for many processes; see the module docstring.

    ``client_or_url`` is a ``redis.asyncio.Redis`` (the caller closes it) or a URL (this
    limiter makes the client and closes it in ``aclose``; a URL it cannot use raises
    ``ConfigError``).
    ``fallback_workers`` returns the live worker count (None: 1). ``call_timeout_s`` bounds
    each Redis command (a positive number of seconds, else ``ValueError``); past it Redis counts
    as unreachable. ``backend`` is ``"redis"`` or ``"local-fallback"``; ``degraded`` is True
    while falling back.
    """

    def __init__(
        self,
        client_or_url: Redis | str,
        *,
        clock: Clock,
        fallback_workers: Callable[[], int] | None = None,
        prefix: str = "omnipost",
        probe_s: float = 1.0,
        call_timeout_s: float = 0.5,
    ) -> None:
        if not (math.isfinite(call_timeout_s) and call_timeout_s > 0):
            raise ValueError(f"call_timeout_s must be a positive number, not {call_timeout_s!r}.")
        if isinstance(client_or_url, str):
            self._client = _client_for(client_or_url)
            self._owns_client = True
        else:
            self._client = client_or_url
            self._owns_client = False
        self._clock = clock
        self._workers = fallback_workers or (lambda: 1)
        self._prefix = prefix
        self._probe_s = probe_s
        self._call_timeout_s = call_timeout_s
        self._scripts = {name: self._client.register_script(_lua(name)) for name in _SCRIPTS}
        self._set_key = f"{prefix}:buckets"
        self._marker_key = f"{prefix}:seeded"
        self._rejoin_key = f"{prefix}:rejoined"  # set for probe_s by the first process back
        self._names: dict[BucketKey, tuple[str, str, str]] = {}
        self._limits: dict[BucketKey, Limit] = {}  # what this process configured, for the fallback
        self._pending: dict[BucketKey, Limit | None] = {}  # configured while Redis was away
        self._fallback: LocalLimiter | None = None
        self._divisor = 1
        self._next_probe = 0.0
        self._seeding = asyncio.Lock()
        self._seen_marker = False  # after that, a missing marker means Redis lost its data

    @property
    def backend(self) -> str:
        return "redis" if self._fallback is None else "local-fallback"

    @property
    def degraded(self) -> bool:
        return self._fallback is not None

    # -- the Limiter protocol ----------------------------------------------------------------

    async def configure(self, key: BucketKey, limit: Limit | None) -> None:
        if limit is None:
            self._limits.pop(key, None)
        else:
            self._limits[key] = limit
        if await self._use_redis():
            try:
                await self._configure(key, limit, fill="full")
                return
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        self._pending[key] = limit
        local = self._local()
        share = None if limit is None else _share(limit, self._divisor)
        local.configure_at(self._clock.monotonic(), key, share)

    async def reserve(self, keys: Sequence[BucketKey], n: int) -> Reservation:
        unique = tuple(dict.fromkeys(keys))
        if n <= 0:
            return Reservation(unique, 0)
        if await self._use_redis():
            try:
                return await self._reserve(unique, n)
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        return self._local().reserve_at(self._clock.monotonic(), unique, n)

    async def refund(self, reservation: Reservation, n: int) -> None:
        n = min(n, reservation.granted)
        if n <= 0:
            return
        if await self._use_redis():
            try:
                await self._script("refund", self._triples(reservation.keys), [n])
                return
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        self._local().refund_at(self._clock.monotonic(), reservation, n)

    async def block(self, key: BucketKey, for_s: float) -> None:
        """See ``Limiter.block``. Raises ``ValueError`` when ``for_s`` is not finite."""
        if not math.isfinite(for_s):
            raise ValueError(f"a block must last a finite number of seconds, not {for_s!r}.")
        if await self._use_redis():
            try:
                await self._script("block", self._triples([key]), [repr(float(for_s))])
                return
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        self._local().block_at(self._clock.monotonic(), key, for_s)

    async def levels(self) -> list[BucketLevel]:
        """Every bucket configured in Redis (by any process), sorted by key; while falling
        back, this process's buckets with the shares it enforces."""
        if await self._use_redis():
            try:
                return await self._levels()
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        return self._local().levels_at(self._clock.monotonic())

    async def aclose(self) -> None:
        """Close the client if this limiter made it."""
        if self._owns_client:
            try:
                await self._client.aclose()
            except _UNAVAILABLE as exc:
                log.debug("closing the Redis client: %s", exc)

    # -- Redis -------------------------------------------------------------------------------

    async def _bounded(self, command: Awaitable[_T]) -> _T:
        """``command``'s result, or the builtin ``TimeoutError`` after ``call_timeout_s``: a hung
        Redis must not hold a send for the client's socket timeout. Cancelling mid-reply is
        safe: redis-py drops that connection rather than reuse it out of step."""
        try:
            async with asyncio.timeout(self._call_timeout_s):
                return await command
        except TimeoutError:  # the builtin one; redis-py's own is a RedisError
            raise TimeoutError(f"no answer within {self._call_timeout_s:g} s") from None

    async def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        """Run one of the Lua scripts, within ``call_timeout_s``."""
        return await self._bounded(self._scripts[name](keys=keys, args=args))

    def _base(self, key: BucketKey) -> str:
        tenant, provider = quote(key.tenant, safe=""), quote(key.provider, safe="")
        if key.scope is BucketScope.TENANT:
            return f"{self._prefix}:{{t:{tenant}}}:tenant"
        if key.scope is BucketScope.PROVIDER:
            return f"{self._prefix}:{{p:{provider}}}:provider"
        return f"{self._prefix}:{{t:{tenant}}}:pair:{provider}"

    def _triples(self, keys: Sequence[BucketKey]) -> list[str]:
        """The (limit, state, block) Redis keys of each bucket, flat, as the scripts take them."""
        names: list[str] = []
        for key in keys:
            triple = self._names.get(key)
            if triple is None:  # a few per tenant and provider: worth keeping, not re-quoting
                base = self._base(key)
                triple = self._names[key] = (f"{base}:limit", f"{base}:state", f"{base}:block")
            names.extend(triple)
        return names

    @staticmethod
    def _member(key: BucketKey) -> str:
        return f"{key.scope.value}:{quote(key.tenant, safe='')}:{quote(key.provider, safe='')}"

    @staticmethod
    def _key(member: str) -> BucketKey:
        scope, tenant, provider = member.split(":")
        return BucketKey(BucketScope(scope), unquote(tenant), unquote(provider))

    async def _configure(self, key: BucketKey, limit: Limit | None, *, fill: str) -> None:
        base = self._base(key)
        keys = [self._set_key, f"{base}:limit", f"{base}:state"]
        if limit is None:
            args = [self._member(key), "", "", fill]
        else:
            args = [self._member(key), repr(limit.rate_per_s), repr(limit.burst), fill]
        await self._script("configure", keys, args)

    async def _reserve(self, keys: tuple[BucketKey, ...], n: int) -> Reservation:
        redis_keys = [self._marker_key, *self._triples(keys)]
        granted, wait = -1, "0"
        for _ in range(2):
            granted, wait = await self._script("reserve", redis_keys, [n])
            if granted >= 0:
                self._seen_marker = True
                break
            await self._seed()
        granted = max(0, int(granted))
        wait_s = float(_text(wait))
        return Reservation(keys, granted, math.inf if wait_s < 0 else wait_s)

    async def _seed(self) -> None:
        """Write every limit this process knows (a bucket that was missing starts empty), then
        the marker. Runs on a fresh Redis, and again whenever Redis lost its data."""
        async with self._seeding:
            if await self._bounded(self._client.exists(self._marker_key)):
                return  # another task (or process) has just done it
            if self._seen_marker:
                log.warning(
                    "Redis at %s has lost the rate limits (restarted or flushed); restoring"
                    " the %d this process knows, empty.",
                    self._where(),
                    len(self._limits),
                )
            for key, limit in list(self._limits.items()):
                await self._configure(key, limit, fill="empty")
            await self._bounded(self._client.set(self._marker_key, "1"))

    async def _levels(self) -> list[BucketLevel]:
        members: set[Any] = await self._bounded(
            cast(Awaitable[set[Any]], self._client.smembers(self._set_key))
        )
        keys = sorted(self._key(_text(member)) for member in members)
        if not keys:
            return []
        rows = await self._script("levels", self._triples(keys))
        levels = []
        for key, row in zip(keys, rows, strict=True):
            if row:
                tokens, burst, rate, blocked = (float(_text(x)) for x in row)
                levels.append(BucketLevel(key, tokens, burst, rate, blocked))
        return levels

    # -- falling back ------------------------------------------------------------------------

    async def _use_redis(self) -> bool:
        """True unless falling back; then True only for one probe every ``probe_s``, after
        Redis answered a PING and took the limits configured while it was away."""
        if self._fallback is None:
            return True
        now = self._clock.monotonic()
        if now < self._next_probe:
            return False
        self._next_probe = now + self._probe_s  # concurrent callers stay local meanwhile
        try:
            await self._bounded(self._client.ping())
            await self._seed()  # first, so a Redis that lost its data gets them back empty
            for key, limit in list(self._pending.items()):
                await self._configure(key, limit, fill="full")
                self._pending.pop(key, None)
            await self._hold_for_peers()
        except _UNAVAILABLE as exc:
            log.debug("Redis at %s is still unavailable: %s", self._where(), exc)
            return False
        log.warning(
            "Redis at %s answers again; rate limits are shared by all workers again.",
            self._where(),
        )
        self._fallback = None
        return True

    async def _hold_for_peers(self) -> None:
        """Other workers keep spending their local shares until their own next probe, at most
        ``probe_s`` from now (every process uses the same ``probe_s``). So the first process
        back holds every bucket it knows empty for ``probe_s`` (a ``block``): no window then
        sees Redis's grants on top of a straggler's local ones."""
        if max(1, self._workers()) == 1 or not self._limits:
            return
        hold_ms = max(1, math.ceil(self._probe_s * 1000))
        if not await self._bounded(self._client.set(self._rejoin_key, "1", nx=True, px=hold_ms)):
            return  # another process came back moments ago and holds them
        for key in list(self._limits):
            await self._script("block", self._triples([key]), [repr(self._probe_s)])

    def _degrade(self, exc: BaseException) -> None:
        self._next_probe = self._clock.monotonic() + self._probe_s
        if self._fallback is not None:
            return
        self._divisor = max(1, self._workers())
        log.warning(
            "Redis at %s is unavailable (%s: %s); each worker now enforces 1/%d of every rate"
            " limit on its own until Redis answers again.",
            self._where(),
            type(exc).__name__,
            exc,
            self._divisor,
        )
        self._fallback = LocalLimiter(self._clock)
        now = self._clock.monotonic()
        for key, limit in self._limits.items():
            self._fallback.configure_at(now, key, _share(limit, self._divisor))
            self._fallback.block_at(now, key, 0.0)  # empty: Redis may have just granted a burst

    def _local(self) -> LocalLimiter:
        """The fallback, its shares brought up to date with the live worker count."""
        assert self._fallback is not None
        workers = max(1, self._workers())
        if workers != self._divisor:
            self._divisor = workers
            now = self._clock.monotonic()
            for key, limit in self._limits.items():
                self._fallback.configure_at(now, key, _share(limit, workers))
        return self._fallback

    def _where(self) -> str:
        kwargs = self._client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix:{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"

    def __repr__(self) -> str:
        return (
            f"<RedisLimiter {self._where()} prefix={self._prefix!r} backend={self.backend}"
            f" limits={len(self._limits)} pending={len(self._pending)}>"
        )
