"""Tenant API keys: made, listed, revoked, and checked when a caller presents one.

A key is ``op_`` and 12 hex digits (its public prefix, unique, what listings and the audit log
name) then ``_`` and 43 characters of base64url: 256 random bits. It is returned once, by
``api_key_create``; the store keeps the prefix and the SHA-256 of the whole key, and
``api_key_check`` compares digests in constant time. A key never reaches a log, an audit entry
or a listing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable

from engine.core.errors import ConfigError
from engine.facade.parts import EngineParts
from engine.store import ApiKeyRecord

__all__ = ["API_KEY_SCOPES", "ApiKeysPart", "parse_scope"]

# send: enqueue and cancel; read: look at notifications, limits; webhooks: the tenant's
# endpoints for status events (never given unless asked for).
API_KEY_SCOPES = ("send", "read", "webhooks")
DEFAULT_SCOPES = ("send", "read")
_PREFIX = "op_"
_SHAPE = re.compile(r"(op_[0-9a-f]{12})_[A-Za-z0-9_-]{43}")
_NAME_MAX = 100
# A key's last use is written at most this often: a caller presenting it on every request
# would otherwise make every request a write.
_USED_EVERY_S = 60.0


def parse_scope(text: str | Iterable[str]) -> tuple[str, ...]:
    """``send,read,webhooks`` (or the names) as a tuple in ``API_KEY_SCOPES``'s order;
    ConfigError for an unknown or empty scope."""
    parts = text.split(",") if isinstance(text, str) else text
    names = [n.strip() for n in parts if n.strip()]  # "send,", " " and "" name nothing
    unknown = sorted({n for n in names if n not in API_KEY_SCOPES})
    if unknown:
        raise ConfigError(
            f"unknown scope {unknown[0]!r}: give {', '.join(API_KEY_SCOPES)}, comma separated."
        )
    if not names:
        raise ConfigError(f"give a scope: {', '.join(API_KEY_SCOPES)}, comma separated.")
    return tuple(s for s in API_KEY_SCOPES if s in names)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeysPart(EngineParts):
    async def api_key_create(
        self, tenant: str, *, name: str = "", scope: Iterable[str] = DEFAULT_SCOPES
    ) -> tuple[ApiKeyRecord, str]:
        """A new key for ``tenant`` and the key itself, which nothing can show again; audited
        (by its id and prefix). NotFound for an unknown tenant, ConfigError for a bad name or
        scope."""
        scopes = parse_scope(list(scope))
        name = name.strip()
        if len(name) > _NAME_MAX or not name.isprintable():
            raise ConfigError(
                f"an api key's name is printable text of at most {_NAME_MAX} characters."
            )
        prefix = _PREFIX + secrets.token_hex(6)
        key = f"{prefix}_{secrets.token_urlsafe(32)}"
        record = await self.store.api_keys.add(
            tenant,
            prefix=prefix,
            digest=_digest(key),
            name=name,
            scope=scopes,
            now=self.clock.wall(),
            actor=self.actor,
        )
        return record, key

    async def api_keys(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """Every key, or ``tenant``'s (NotFound when there is no such tenant): never the keys."""
        return await self.store.api_keys.listing(tenant)

    async def api_key_revoke(self, key_id: int) -> ApiKeyRecord:
        """Revoke key ``key_id`` for good (audited): NotFound for no such key, Conflict when it
        already is."""
        return await self.store.api_keys.revoke(key_id, now=self.clock.wall(), actor=self.actor)

    async def api_key_check(self, key: str) -> ApiKeyRecord | None:
        """The live key ``key`` is (its last use recorded, to the minute), or None when it is
        malformed, unknown or revoked: the caller cannot tell which."""
        shape = _SHAPE.fullmatch(key)
        if shape is None:
            return None
        found = await self.store.api_keys.find(shape.group(1))
        if found is None:
            return None
        record, digest = found
        if not hmac.compare_digest(digest, _digest(key)) or record.revoked_at is not None:
            return None
        now = self.clock.wall()
        if record.last_used_at is None or now - record.last_used_at >= _USED_EVERY_S:
            await self.store.api_keys.used(record.id, now)
        return record
