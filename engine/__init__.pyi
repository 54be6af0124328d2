"""Types of the ``engine`` façade (``engine/__init__.py`` loads each name lazily, from
the module this stub names, on first use: see there)."""

from .clock import (
    Clock,
    FakeClock,
    SystemClock,
)
from .crypto import (
    SecretBox,
    mask,
)
from .dispatcher import DispatcherSettings
from .domain import (
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
from .engine import (
    Engine,
    EngineSettings,
    EngineState,
    SimulationProgress,
)
from .envelope import (
    Window,
    worst_window,
)
from .errors import (
    ConfigError,
    Conflict,
    NotFound,
    OmniPostError,
    StoreError,
    StoreUnavailable,
)
from .glance_model import (
    BRIEF_VIEW,
    BucketPick,
    BucketPicks,
    QueueTotals,
    SnapshotView,
)
from .health import (
    CircuitState,
    ProviderHealth,
)
from .limiter import (
    Limiter,
    Reservation,
)
from .local_limiter import LocalLimiter
from .plan_api import MAX_PLANNED
from .plan_model import (
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
from .policy import RetryPolicy
from .present import (
    MASKED_VALUE,
    fmt_limit,
    masked_secrets,
)
from .providers import (
    BUILTIN_KINDS,
    COMMON_OPTIONS,
    PROVIDER_KINDS,
    OptionSpec,
    Provider,
    ProviderConfig,
    ProviderFactory,
    ProviderKind,
)
from .ratelimit import TokenBucket
from .redis_limiter import RedisLimiter
from .retention import (
    DEFAULT_RETENTION,
    PruneReport,
    Retention,
    format_age,
    parse_age,
)
from .simulate import (
    Pattern,
    predicted_drain_s,
)
from .store import (
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
from .store.rotation import (
    RotationProgress,
    RotationReport,
    TableRotation,
)
from .telemetry import (
    Counters,
    Snapshot,
    TenantDepth,
)
from .tenant_lines import (
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
