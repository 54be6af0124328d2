"""The CLI's JSON form of each engine record: the record's own fields (``dataclasses.asdict``),
less the store's internal ids, renamed only where ``--json`` has always used other names.
Secrets never reach here unmasked."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from app.output import RETENTION_WINDOWS
from engine import (
    ApiKeyRecord,
    BucketLevel,
    Circuit,
    Limit,
    NotificationView,
    PairLimit,
    ProviderRecord,
    PruneReport,
    Retention,
    StoreSize,
    SuppressionRecord,
    TenantDepth,
    TenantImport,
    TenantRecord,
    WorkerRecord,
    format_age,
    masked_secrets,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "apikey_json",
    "bucket_json",
    "circuit_json",
    "dead_json",
    "depth_json",
    "import_json",
    "limit_json",
    "pair_json",
    "provider_json",
    "prune_json",
    "retention_json",
    "size_json",
    "suppression_json",
    "tenant_json",
    "worker_json",
]

JsonObject = dict[str, Any]


def _fields(record: DataclassInstance, *, drop: Collection[str] = ()) -> JsonObject:
    return {k: v for k, v in dataclasses.asdict(record).items() if k not in drop}


def suppression_json(record: SuppressionRecord) -> JsonObject:
    """A suppressed recipient as listings show it: masked (the record holds no other form)."""
    return _fields(record)


def apikey_json(record: ApiKeyRecord) -> JsonObject:
    """A key as listings show it: its prefix, never the key (the record has no field for it)."""
    return _fields(record)


def limit_json(limit: Limit | None) -> JsonObject | None:
    """``{"rate_per_s": ..., "burst": ...}``, or None for no limit."""
    return None if limit is None else _fields(limit)


def tenant_json(tenant: TenantRecord) -> JsonObject:
    return _fields(tenant, drop={"id"})


def import_json(summary: TenantImport) -> JsonObject:
    """``{"imported": 3, "added": 2, "updated": 1}``."""
    return {"imported": summary.total} | _fields(summary)


def provider_json(provider: ProviderRecord) -> JsonObject:
    """Its options as stored, and its secrets by name with every value masked."""
    shown = _fields(provider, drop={"id", "secret_names", "secrets"})
    return shown | {"secrets": masked_secrets(provider.secret_names)}


def circuit_json(health: Circuit) -> JsonObject:
    """A provider's circuit: ``state`` (closed, open, half-open), ``since``, ``last_error``,
    ``next_probe_at`` (unix s) and ``failures`` in a row."""
    return _fields(health) | {"state": health.state.value}


def pair_json(pair: PairLimit) -> JsonObject:
    return _fields(pair, drop={"tenant_id", "provider_id"})


def worker_json(worker: WorkerRecord) -> JsonObject:
    return _fields(worker, drop={"started_at"})


def depth_json(depth: TenantDepth) -> JsonObject:
    return _fields(depth)


def bucket_json(level: BucketLevel) -> JsonObject:
    """The bucket by its name (``tenant:acme``), with its level, burst and rate."""
    return _fields(level, drop={"key", "blocked_for_s"}) | {"bucket": str(level.key)}


def dead_json(tenant: str, view: NotificationView, provider: str | None) -> JsonObject:
    """A dead notification, named by its tenant and provider; the recipient is masked."""
    return {
        "id": view.id,
        "tenant": tenant,
        "provider": provider,
        "recipient": view.recipient_masked,
        "key": view.idempotency_key,
        "failures": view.failures,
        "attempt": view.attempt,
        "error": view.last_error,
        "finished_at": view.finished_at,
    }


def size_json(size: StoreSize) -> JsonObject:
    return _fields(size)


def prune_json(report: PruneReport) -> JsonObject:
    return _fields(report, drop={"complete"})


def retention_json(retention: Retention) -> dict[str, dict[str, float | str | None]]:
    """Each window by name: ``seconds`` (None keeps forever) and its ``text`` form."""
    return {
        name: {"seconds": getattr(retention, field), "text": format_age(getattr(retention, field))}
        for name, field, _ in RETENTION_WINDOWS
    }
