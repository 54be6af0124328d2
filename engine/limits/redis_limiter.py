"""The Redis ``Limiter``: token buckets shared by every worker process on one Redis server.

Each operation is one Lua function (``engine/limits/redis_lua/``, run by
``engine/limits/redis_calls.py``:
a function library on Redis 7, scripts before), so it is atomic across processes: a
reservation reads, refills and debits every bucket of a send at once, on Redis's clock
(``TIME`` inside the script; a clock stepped back mints nothing). Limits live in Redis too, so
``configure`` from any process reaches all of them. Fractions of a token leave Lua as strings.

Keys, under ``prefix``: one hash per bucket (limit, level and block: see
``redis_lua/common.lua``), so a reservation over a send's buckets is one read and at most one
write each. A tenant's and its pairs' buckets share the hash tag ``{t:TENANT}``, a provider's
has ``{p:PROVIDER}``; there are also a set of configured buckets and a seed marker, whose
absence tells a Redis that lost its data (restart, flush): every limit this process knows is
then written back, empty, never full. Redis 7.0 has no expiry per field, so an idle bucket's
level is not expired as it refills: the ``tokens`` and ``stamp`` fields stay until a write
finds the bucket full and drops them. That costs two small fields per idle configured bucket
(whose hash is kept for its limit anyway), not a key, and saves a command per write.

This layout (``:v2`` marker and set) replaced three keys per bucket. On a Redis holding only
the old one, buckets start empty (their old levels are not read), as after a loss; the old
keys are left unused. Workers on the two layouts would enforce each limit apart, so all of
them must be upgraded together.

A send's script touches a tenant's and a provider's keys, which hash to different slots, so
Redis Cluster refuses it (CROSSSLOT): a single node, or a primary behind Sentinel, is supported.

When Redis is unreachable the limiter says so once, at WARNING, and falls back to a
``LocalFallback`` (``engine/limits/redis_fallback.py``): in process, each worker's share of every
limit it remembers (divided by the live workers, or by more if Redis saw more reserving lately: a
sorted set, ``:peers:v2``), starting empty. It probes Redis at most every ``probe_s`` and
returns to it when it answers, pushing any limits configured in the meantime and draining every
bucket it knows (Redis's levels refilled while the local shares were spent); the first process
back holds them empty for ``probe_s``, while the others may still spend their local shares.
Every process must use the same ``probe_s``. Driver errors never leave this class.

The batch calls (``reserve_many``, ``retake_many``, ``refund_many``:
``engine/limits/redis_batch.py``) are the single calls in order, in one round trip of scripts
over up to 500 calls each (each with ``call_timeout_s`` to answer), falling back call by call
as those do. ``levels(keys)`` reads only those buckets, in one script.

A Redis that hangs (paused, or stuck on the network) rather than refusing counts as unreachable
too: every command has ``call_timeout_s`` to answer, is not retried after a timeout, and then
the limiter falls back and probes as above. Those seconds are counted while this process's loop
could read the answer: a loop busy elsewhere past a deadline is not Redis's silence, and the
call waits a little longer (``engine/limits/redis_calls.py``, ``bounded``); the log says which
it was. A command that timed out may still run once Redis
wakes up; at worst that spends tokens nobody used, never grants more.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from engine.core.clock import Clock
from engine.core.domain import BucketKey, BucketLevel, BucketScope, Limit
from engine.core.errors import ConfigError
from engine.limits.limiter import Reservation
from engine.limits.redis_batch import RedisBatches
from engine.limits.redis_calls import UNAVAILABLE as _UNAVAILABLE
from engine.limits.redis_calls import LuaCalls, bounded
from engine.limits.redis_fallback import PEERS_EVERY_S, PEERS_S, Granted, LocalFallback

__all__ = ["PEERS_EVERY_S", "RedisLimiter"]

log = logging.getLogger(__name__)

_PEERS_ARG = repr(PEERS_S)

_T = TypeVar("_T")
_BACKSTOP = 40  # the driver's own timeouts, in call timeouts: past what ``bounded`` allows


def _client_for(url: str, timeout_s: float) -> Redis:
    """A client whose own socket timeouts are only a backstop (``_BACKSTOP`` times
    ``timeout_s``): the limiter's timer (``bounded``) gives up after ``timeout_s`` of a loop
    that could read the answer, and the driver's timers cannot tell a late loop from a silent
    Redis. It retries once, for a pooled connection the server has dropped, but never after a
    timeout: a Redis that did not answer once will not answer a retry in time either. Raises
    ``ConfigError`` for a URL it cannot use."""
    retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    backstop_s = timeout_s * _BACKSTOP
    try:
        return Redis.from_url(
            url, socket_connect_timeout=backstop_s, socket_timeout=backstop_s, retry=retry
        )
    except ValueError as exc:
        raise ConfigError(f"cannot use that Redis URL: {exc}") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLimiter(RedisBatches):
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
            self._client = _client_for(client_or_url, call_timeout_s)
            self._owns_client = True
        else:
            self._client = client_or_url
            self._owns_client = False
        self._clock = clock
        self._prefix = prefix
        self._probe_s = probe_s
        self._call_timeout_s = call_timeout_s
        self._calls = LuaCalls(self._client, timeout_s=call_timeout_s)
        self._set_key = f"{prefix}:buckets:v2"
        self._marker_key = f"{prefix}:seeded:v2"
        self._limits_key = f"{prefix}:limits:v2"  # the digest of the last set written whole
        self._old_marker_key = f"{prefix}:seeded"  # the three-keys-per-bucket layout's
        self._rejoin_key = f"{prefix}:rejoined"  # set for probe_s by the first process back
        self._peers_key = f"{prefix}:peers:v2"
        self._name = uuid.uuid4().hex  # this process's, among the peers
        self._names: dict[BucketKey, str] = {}
        self._reserve_keys: dict[tuple[BucketKey, ...], tuple[str, ...]] = {}
        self._fallback = LocalFallback(clock, fallback_workers or (lambda: 1))
        self._pending: dict[BucketKey, Limit | None] = {}  # configured while Redis was away
        self._next_probe = 0.0
        self._seeding = asyncio.Lock()
        self._seen_marker = False  # after that, a missing marker means Redis lost its data
        self._count_peers_at = -math.inf  # when to write this process into the peers set next

    counts_lent = True  # each bucket's ``lent`` (redis_lua/common.lua)

    @property
    def backend(self) -> str:
        return "local-fallback" if self._fallback.active else "redis"

    @property
    def degraded(self) -> bool:
        return self._fallback.active

    # -- the Limiter protocol ----------------------------------------------------------------

    async def configure(self, key: BucketKey, limit: Limit | None) -> None:
        self._fallback.remember(key, limit)
        if await self._use_redis():
            try:
                await self._configure(key, limit, fill="full")
                return
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        self._pending[key] = limit
        self._fallback.apply(key)

    async def reserve(self, keys: Sequence[BucketKey], n: int) -> Reservation:
        unique = tuple(dict.fromkeys(keys))
        if n <= 0:
            return Reservation(unique, 0)
        if not self._fallback.active or await self._use_redis():
            era = self._fallback.era  # Redis's, even if the answer comes after a fallback took over
            try:
                return await self._reserve(unique, n, era)
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        return self._fallback.reserve(unique, n)

    async def refund(self, reservation: Reservation, n: int) -> None:
        """See ``Limiter.refund``; only to the backend that granted ``reservation`` (one made
        elsewhere counts as the current one's), and only while it is in use: a batch of one
        (``refund_many``), whose script bounds what each bucket gets back."""
        await self.refund_many([(reservation, n)])

    async def retake(self, reservation: Reservation, n: int) -> Reservation:
        """See ``Limiter.retake``: a batch of one (``retake_many``), one round trip. Tokens
        another backend granted are not given back (as in ``refund``)."""
        [again] = await self.retake_many([(reservation, n)])
        return again

    async def block(self, key: BucketKey, for_s: float) -> None:
        """See ``Limiter.block``. Raises ``ValueError`` when ``for_s`` is not finite."""
        if not math.isfinite(for_s):
            raise ValueError(f"a block must last a finite number of seconds, not {for_s!r}.")
        if await self._use_redis():
            try:
                await self._script("block", self._hashes([key]), [repr(float(for_s))])
                return
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        self._fallback.block(key, for_s)

    async def levels(self, keys: Sequence[BucketKey] | None = None) -> list[BucketLevel]:
        """Every bucket configured in Redis (by any process), or those among ``keys``, sorted
        by key; while falling back, this process's buckets with the shares it enforces."""
        if keys is not None and not keys:
            return []
        if await self._use_redis():
            try:
                return await self._levels(keys)
            except _UNAVAILABLE as exc:
                self._degrade(exc)
        return self._fallback.levels(keys)

    async def aclose(self) -> None:
        """Close the limiter's own connections, and the client if this limiter made it."""
        try:
            await self._calls.aclose()
        except _UNAVAILABLE as exc:
            log.debug("closing the Redis connections: %s", exc)
        if self._owns_client:
            try:
                await self._client.aclose()
            except _UNAVAILABLE as exc:
                log.debug("closing the Redis client: %s", exc)

    # -- Redis -------------------------------------------------------------------------------

    async def _bounded(self, command: Awaitable[_T]) -> _T:
        """``command``'s result, or a ``TimeoutError`` after ``call_timeout_s`` (of a loop on
        time: ``bounded``): a hung Redis must not hold a send for a longer socket timeout."""
        return await bounded(command, self._call_timeout_s)

    async def _script(self, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        """Run one of the Lua scripts (``engine/limits/redis_calls.py``), within
        ``call_timeout_s``."""
        return await self._calls(name, keys, args)

    def _base(self, key: BucketKey) -> str:
        tenant, provider = quote(key.tenant, safe=""), quote(key.provider, safe="")
        if key.scope is BucketScope.TENANT:
            return f"{self._prefix}:{{t:{tenant}}}:tenant"
        if key.scope is BucketScope.PROVIDER:
            return f"{self._prefix}:{{p:{provider}}}:provider"
        if key.scope is BucketScope.ENDPOINT:
            return f"{self._prefix}:{{t:{tenant}}}:endpoint:{provider}"
        return f"{self._prefix}:{{t:{tenant}}}:pair:{provider}"

    def _hashes(self, keys: Sequence[BucketKey]) -> list[str]:
        """The Redis hash of each bucket, as the scripts take them."""
        names: list[str] = []
        for key in keys:
            name = self._names.get(key)
            if name is None:  # a few per tenant and provider: worth keeping, not re-quoting
                name = self._names[key] = self._base(key)
            names.append(name)
        return names

    @staticmethod
    def _member(key: BucketKey) -> str:
        return f"{key.scope.value}:{quote(key.tenant, safe='')}:{quote(key.provider, safe='')}"

    @staticmethod
    def _key(member: str) -> BucketKey:
        scope, tenant, provider = member.split(":")
        return BucketKey(BucketScope(scope), unquote(tenant), unquote(provider))

    async def _configure(self, key: BucketKey, limit: Limit | None, *, fill: str) -> None:
        await self._bounded(self._client.delete(self._limits_key))  # no longer that set
        await self._script("configure", *self._configure_call(key, limit, fill))

    def _configure_call(
        self, key: BucketKey, limit: Limit | None, fill: str
    ) -> tuple[list[str], list[str]]:
        keys = [self._set_key, *self._hashes([key]), self._marker_key, self._old_marker_key]
        if limit is None:
            return keys, [self._member(key), "", "", fill]
        return keys, [self._member(key), repr(limit.rate_per_s), repr(limit.burst), fill]

    async def _reserve(self, keys: tuple[BucketKey, ...], n: int, era: int) -> Reservation:
        """Reserve ``n`` from ``keys``."""
        redis_keys = self._reserve_keys.get(keys)
        if redis_keys is None:  # the same few tuples again and again: build each once
            redis_keys = (self._marker_key, *self._hashes(keys))
            if len(self._reserve_keys) < 4096:
                self._reserve_keys[keys] = redis_keys
        now = self._clock.monotonic()
        counting = now >= self._count_peers_at  # the set of peers needs no write per reservation
        if counting:
            redis_keys = (*redis_keys, self._peers_key)
        args: list[int | str] = [n, self._name, _PEERS_ARG] if counting else [n]
        reply: list[Any] = [-1, "0", 0, 0]
        for _ in range(2):
            reply = await self._script("reserve", redis_keys, args)
            if reply[0] >= 0:
                self._seen_marker = True
                if counting:
                    self._count_peers_at = now + PEERS_EVERY_S
                    self._fallback.saw_peers(int(reply[2]))
                break
            await self._seed()
        granted, wait, _peers, held_at, *rest = reply
        granted = max(0, int(granted))
        wait_s = float(_text(wait))
        wait_s = math.inf if wait_s < 0 else wait_s
        held = (keys[held_at - 1],) if 0 < held_at <= len(keys) else ()
        at, rooms = (
            (float(_text(rest[0])), tuple(float(_text(r)) for r in rest[1:])) if rest else (0.0, ())
        )
        return Granted(keys, granted, wait_s, held, (wait_s,) if held else (), at, rooms, era=era)

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
                    len(self._fallback.limits),
                )
            await self._configure_all(list(self._fallback.limits.items()), fill="empty")
            await self._bounded(self._client.set(self._marker_key, "1"))

    async def _levels(self, only: Sequence[BucketKey] | None) -> list[BucketLevel]:
        """The levels of ``only`` (those configured), else of every bucket in the set."""
        if only is None:
            members: set[Any] = await self._bounded(
                cast(Awaitable[set[Any]], self._client.smembers(self._set_key))
            )
            only = [self._key(_text(member)) for member in members]
        keys = sorted(set(only))
        if not keys:
            return []
        rows = await self._script("levels", self._hashes(keys))
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
        if not self._fallback.active:
            return True
        now = self._clock.monotonic()
        if now < self._next_probe:
            return False
        self._next_probe = now + self._probe_s  # concurrent callers stay local meanwhile
        try:
            await self._bounded(self._client.ping())
            await self._seed()  # first, so a Redis that lost its data gets them back empty
            pending = list(self._pending.items())
            await self._configure_all(pending, fill="full")
            for key, _limit in pending:
                self._pending.pop(key, None)
            await self._rejoin()
        except _UNAVAILABLE as exc:
            log.debug("Redis at %s is still unavailable: %s", self._where(), exc)
            return False
        log.warning(
            "Redis at %s answers again; rate limits are shared by all workers again.",
            self._where(),
        )
        self._fallback.stop()
        return True

    async def _rejoin(self) -> None:
        """Drain every bucket this process knows: Redis's level refilled (or was kept, by a
        Redis that hung or that only this process lost) while the local share was spent.
        Other workers keep spending their local shares until their own next probe, at most
        ``probe_s`` from now (every process uses the same ``probe_s``). So the first process
        back holds the buckets empty for ``probe_s`` (a ``block``): no window then sees Redis's
        grants on top of a straggler's local ones."""
        if not self._fallback.limits:
            return
        hold_s = 0.0
        if self._fallback.sharing() > 1:
            hold_ms = max(1, math.ceil(self._probe_s * 1000))
            if await self._bounded(self._client.set(self._rejoin_key, "1", nx=True, px=hold_ms)):
                hold_s = self._probe_s  # else another process came back moments ago: held
        for key in list(self._fallback.limits):
            await self._script("block", self._hashes([key]), [repr(hold_s)])

    def _degrade(self, exc: BaseException) -> None:
        self._next_probe = self._clock.monotonic() + self._probe_s
        if self._fallback.active:
            return
        divisor = self._fallback.start()
        log.warning(
            "Redis at %s is unavailable (%s: %s); each worker now enforces 1/%d of every rate"
            " limit on its own until Redis answers again.",
            self._where(),
            type(exc).__name__,
            exc,
            divisor,
        )

    def _where(self) -> str:
        kwargs = self._client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix:{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"

    def __repr__(self) -> str:
        return (
            f"<RedisLimiter {self._where()} prefix={self._prefix!r} backend={self.backend}"
            f" limits={len(self._fallback.limits)} pending={len(self._pending)}>"
        )
