"""OmniPost's engine: rate-limited, leased, at-least-once notification dispatch. No Qt here.

The console and the CLI drive it through these names::

    async with Engine(Store(url, box), LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
        await engine.start()
        await engine.enqueue("acme", "sms", "+15551234567", {"text": "hi"})
        snapshot = await engine.snapshot()
        await engine.stop()
"""

from typing import TYPE_CHECKING

from engine.clock import Clock, FakeClock, SystemClock
from engine.crypto import SecretBox, mask
from engine.dispatcher import DispatcherSettings
from engine.domain import (
    MAX_KEY_CHARS,
    UNSET,
    BucketKey,
    BucketLevel,
    Limit,
    Message,
    NotificationState,
    Outcome,
    SendResult,
    Unset,
    is_text,
    limit_of,
    parse_rate,
)
from engine.engine import Engine, EngineSettings, EngineState, SimulationProgress
from engine.envelope import Window, worst_window
from engine.errors import (
    ConfigError,
    Conflict,
    NotFound,
    OmniPostError,
    StoreError,
    StoreUnavailable,
)
from engine.glance_model import BRIEF_VIEW, BucketPick, BucketPicks, QueueTotals, SnapshotView
from engine.health import CircuitState, ProviderHealth
from engine.limiter import Limiter, Reservation
from engine.local_limiter import LocalLimiter
from engine.plan_api import MAX_PLANNED
from engine.plan_model import (
    BacklogTraffic,
    BurstTraffic,
    LimitChange,
    PlanReport,
    PlanResult,
    ProviderModel,
    ProviderPlan,
    ReplayTraffic,
    TenantPlan,
    Traffic,
)
from engine.policy import RetryPolicy
from engine.present import MASKED_VALUE, fmt_limit, masked_secrets
from engine.providers import (
    BUILTIN_KINDS,
    COMMON_OPTIONS,
    PROVIDER_KINDS,
    OptionSpec,
    Provider,
    ProviderConfig,
    ProviderFactory,
    ProviderKind,
)
from engine.ratelimit import TokenBucket
from engine.retention import DEFAULT_RETENTION, PruneReport, Retention, format_age, parse_age
from engine.simulate import Pattern, predicted_drain_s
from engine.store import (
    AuditEntry,
    DeliveryEntry,
    NotificationView,
    PairLimit,
    ProviderRecord,
    Store,
    StoreSize,
    TenantImport,
    TenantRecord,
    TenantSpec,
    WorkerRecord,
    masked_url,
)
from engine.store.rotation import RotationProgress, RotationReport, TableRotation
from engine.telemetry import Counters, Snapshot, TenantDepth
from engine.tenant_lines import (
    load_json,
    parse_tenant_lines,
    rate_text,
    read_tenant_file,
    read_text_lines,
    tenant_line,
)

__all__ = [
    "BRIEF_VIEW",
    "BUILTIN_KINDS",
    "COMMON_OPTIONS",
    "DEFAULT_RETENTION",
    "MASKED_VALUE",
    "MAX_KEY_CHARS",
    "MAX_PLANNED",
    "PROVIDER_KINDS",
    "UNSET",
    "AuditEntry",
    "BacklogTraffic",
    "BucketKey",
    "BucketLevel",
    "BucketPick",
    "BucketPicks",
    "BurstTraffic",
    "CircuitState",
    "Clock",
    "ConfigError",
    "Conflict",
    "Counters",
    "DeliveryEntry",
    "DispatcherSettings",
    "Engine",
    "EngineSettings",
    "EngineState",
    "FakeClock",
    "Limit",
    "LimitChange",
    "Limiter",
    "LocalLimiter",
    "Message",
    "NotFound",
    "NotificationState",
    "NotificationView",
    "OmniPostError",
    "OptionSpec",
    "Outcome",
    "PairLimit",
    "Pattern",
    "PlanReport",
    "PlanResult",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "ProviderHealth",
    "ProviderKind",
    "ProviderModel",
    "ProviderPlan",
    "ProviderRecord",
    "PruneReport",
    "QueueTotals",
    "RedisLimiter",
    "ReplayTraffic",
    "Reservation",
    "Retention",
    "RetryPolicy",
    "RotationProgress",
    "RotationReport",
    "SecretBox",
    "SendResult",
    "SimulationProgress",
    "Snapshot",
    "SnapshotView",
    "Store",
    "StoreError",
    "StoreSize",
    "StoreUnavailable",
    "SystemClock",
    "TableRotation",
    "TenantDepth",
    "TenantImport",
    "TenantPlan",
    "TenantRecord",
    "TenantSpec",
    "TokenBucket",
    "Traffic",
    "Unset",
    "Window",
    "WorkerRecord",
    "fmt_limit",
    "format_age",
    "is_text",
    "limit_of",
    "load_json",
    "mask",
    "masked_secrets",
    "masked_url",
    "parse_age",
    "parse_rate",
    "parse_tenant_lines",
    "predicted_drain_s",
    "rate_text",
    "read_tenant_file",
    "read_text_lines",
    "tenant_line",
    "worst_window",
]


if TYPE_CHECKING:
    from engine.redis_limiter import RedisLimiter


def __getattr__(name: str) -> object:
    """``RedisLimiter`` on first use: it needs the optional redis package, which a store-only
    or console-only install does not have (the ImportError then says so)."""
    if name == "RedisLimiter":
        from engine.redis_limiter import RedisLimiter

        return RedisLimiter
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
