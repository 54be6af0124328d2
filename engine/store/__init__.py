"""The store: SQLite (embedded default) or Postgres, with tenant-scoped repositories."""

from engine.store.database import masked_url, normalize_url
from engine.store.records import (
    ApiKeyRecord,
    AuditEntry,
    Completion,
    DeliveryEntry,
    DepthRow,
    DueKey,
    Enqueue,
    EnqueueResult,
    Leased,
    NewNotification,
    NotificationView,
    PairLimit,
    ProviderRecord,
    SendSample,
    Share,
    StoreSize,
    SuppressionRecord,
    TenantRecord,
    WorkerRecord,
    share_index,
)
from engine.store.requests import ClaimKind, RequestClaim
from engine.store.store import Store
from engine.store.tenant_bulk import TenantImport, TenantSpec

__all__ = [
    "ApiKeyRecord",
    "AuditEntry",
    "ClaimKind",
    "Completion",
    "DeliveryEntry",
    "DepthRow",
    "DueKey",
    "Enqueue",
    "EnqueueResult",
    "Leased",
    "NewNotification",
    "NotificationView",
    "PairLimit",
    "ProviderRecord",
    "RequestClaim",
    "SendSample",
    "Share",
    "Store",
    "StoreSize",
    "SuppressionRecord",
    "TenantImport",
    "TenantRecord",
    "TenantSpec",
    "WorkerRecord",
    "masked_url",
    "normalize_url",
    "share_index",
]
