"""Who is calling, and may they: the bearer key (401), its scope (403) and its request limit
(429), in that order, before a route does anything. A key is never logged, counted by or
echoed in an answer."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from fastapi import Request

from api.coalesce import ROUND_ROWS, Coalescer
from api.metrics import ApiMetrics
from api.problems import ProblemError
from api.recent import Recent
from api.throttle import KeyBuckets, Verdict
from engine import ApiKeyRecord, Engine, Limit, TenantRecord

__all__ = ["ApiSettings", "Caller", "Door"]

_TENANT_TTL_S = 5.0  # a tenant's request limit and queue cap are read again this often
# A live key is checked against the store again after this long: a revoked key stops working
# within a second, and a caller's requests cost no read of the store each.
KEY_TTL_S = 1.0
_QUEUED_TTL_S = 1.0  # a tenant's queued count is read again this often (see ``queued``)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="omnipost"'}


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The server's defaults: each key's request limit, a tenant's queue cap (both where the
    tenant sets none), the largest body; ``share`` divides the request limit between the
    server processes that share it (``--workers``), each keeping its own buckets."""

    api_limit: Limit = field(default_factory=lambda: Limit(100.0, 200.0))
    max_queued: int = 1_000_000
    max_body: int = 1 << 20
    share: int = 1


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    key_id: int
    scope: tuple[str, ...]
    limit: Verdict


class Door:
    """What every route asks first: ``await door.admit(request, "send")``."""

    def __init__(self, engine: Engine, settings: ApiSettings, metrics: ApiMetrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.buckets = KeyBuckets(time.monotonic)
        # SQLite writes one transaction at a time; Postgres overlaps a few, of a few hundred
        # rows each (bench/http_api.py: rounds of any size left this loop idle a fifth of the
        # time while one big round was in the store).
        if engine.store_url.startswith("sqlite"):
            self.coalescer = Coalescer(engine)
        else:
            self.coalescer = Coalescer(engine, writers=4, round_rows=ROUND_ROWS)
        self._tenants = Recent[TenantRecord](_TENANT_TTL_S)
        self._keys = Recent[ApiKeyRecord | None](KEY_TTL_S, keep=_known)  # by the key's SHA-256
        self._queued = Recent[list[int]](_QUEUED_TTL_S)  # tenant -> [count, added since]

    async def admit(self, request: Request, need: str | None) -> Caller:
        """The caller of ``request`` if its key is live, allows ``need`` (``send``, ``read``,
        ``webhooks``; None: any scope) and is within its request limit; else a ProblemError."""
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            self.metrics.refused("unauthorized")
            raise ProblemError(
                401, "send an API key as the header Authorization: Bearer KEY.", headers=_CHALLENGE
            )
        record = await self._check(key.strip())
        if record is None:
            self.metrics.refused("unauthorized")
            raise ProblemError(
                401, "the API key is not valid: unknown, revoked or mistyped.", headers=_CHALLENGE
            )
        if need is not None and need not in record.scope:
            self.metrics.refused("forbidden")
            scope = ", ".join(record.scope)
            doing = "manage webhooks" if need == "webhooks" else need
            raise ProblemError(403, f"this key may not {doing} (its scope is {scope}).")
        tenant = await self.tenant(record.tenant)
        verdict = self.buckets.take(record.id, self.request_limit(tenant))
        if not verdict.allowed:
            self.metrics.refused("rate_limited")
            raise ProblemError(
                429,
                f"this key made more requests than its limit of {_rate(verdict.limit)} allows; "
                f"try again in {verdict.retry_after_s} s.",
                headers=verdict.headers(),
            )
        return Caller(record.tenant, record.id, record.scope, verdict)

    async def _check(self, key: str) -> ApiKeyRecord | None:
        """The live key ``key`` is, as the store said at most ``KEY_TTL_S`` ago (an unknown
        key is asked about each time)."""
        digest = hashlib.sha256(key.encode()).hexdigest()
        return await self._keys.get(digest, lambda: self.engine.api_key_check(key))

    async def queued(self, tenant: str) -> int:
        """About how many notifications ``tenant`` holds queued: the store's count, read at
        most ``_QUEUED_TTL_S`` ago, plus what this server queued for it since. Requests in
        other processes meanwhile are not in it: the cap holds to within a second's intake."""
        kept = await self._queued.get(tenant, lambda: self._count(tenant))
        return kept[0] + kept[1]

    async def _count(self, tenant: str) -> list[int]:
        return [await self.engine.queued_count(tenant), 0]

    def added(self, tenant: str, count: int) -> None:
        """``count`` notifications were just queued for ``tenant`` here."""
        kept = self._queued.peek(tenant)
        if kept is not None:
            kept[1] += count

    async def tenant(self, name: str) -> TenantRecord:
        """The tenant's record, read at most every few seconds."""
        return await self._tenants.get(name, lambda: self.engine.tenant(name))

    def request_limit(self, tenant: TenantRecord) -> Limit:
        limit = tenant.api_limit or self.settings.api_limit
        share = max(1, self.settings.share)
        if share == 1:
            return limit
        return Limit(limit.rate_per_s / share, max(1.0, limit.burst / share))

    def max_queued(self, tenant: TenantRecord) -> int:
        return tenant.max_queued or self.settings.max_queued


def _known(record: ApiKeyRecord | None) -> bool:
    return record is not None


def _rate(limit: Limit) -> str:
    return f"{limit.rate_per_s:g}/s (burst {limit.burst:g})"
