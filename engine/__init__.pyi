"""Types of the ``engine`` façade (``engine/__init__.py`` loads each name lazily, from
the module this stub names, on first use: see there)."""

from .core.circuit import (
    Circuit,
    CircuitState,
)
from .core.clock import (
    Clock,
    FakeClock,
    SystemClock,
)
from .core.crypto import (
    SecretBox,
    mask,
)
from .core.domain import (
    MAX_KEY_CHARS,
    UNSET,
    BucketKey,
    BucketLevel,
    EnqueueItem,
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
from .core.errors import (
    ConfigError,
    Conflict,
    ItemRefused,
    NotCancellable,
    NotFound,
    OmniPostError,
    StoreError,
    StoreUnavailable,
)
from .core.lifetime import lifetimes, parse_duration, parse_time
from .core.policy import RetryPolicy
from .core.present import (
    MASKED_VALUE,
    fmt_limit,
    masked_secrets,
    rfc3339,
)
from .core.retention import (
    DEFAULT_RETENTION,
    PruneReport,
    Retention,
    format_age,
    parse_age,
)
from .core.status_events import EVENT_TYPES, EventType, event_body, event_names, parse_events
from .dispatch.dispatcher import DispatcherSettings
from .dispatch.status_events import CourierSettings
from .facade.api_keys import API_KEY_SCOPES, parse_scope
from .facade.engine import (
    Engine,
    EngineSettings,
    EngineState,
    SimulationProgress,
)
from .facade.overview import AppliedConfig
from .facade.plans import MAX_PLANNED
from .facade.requests import TenantLimits
from .facade.status_events import EndpointView, NewSecret
from .facade.suppressions import MAX_SUPPRESSION_PAGE
from .facade.tenant_lines import (
    load_json,
    parse_tenant_lines,
    rate_text,
    read_tenant_file,
    read_text_lines,
    tenant_line,
)
from .limits.bucket import TokenBucket
from .limits.envelope import (
    Window,
    worst_window,
)
from .limits.limiter import (
    Limiter,
    Reservation,
)
from .limits.local_limiter import LocalLimiter
from .limits.redis_limiter import RedisLimiter
from .planning.model import (
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
from .planning.simulate import (
    Pattern,
    predicted_drain_s,
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
from .providers.endpoint_post import PostAnswer
from .store import (
    ApiKeyRecord,
    AuditEntry,
    ClaimKind,
    DeliveryEntry,
    EnqueueResult,
    NotificationView,
    PairLimit,
    ProviderRecord,
    RequestClaim,
    Store,
    StoreSize,
    SuppressionRecord,
    TenantImport,
    TenantPage,
    TenantQuery,
    TenantRecord,
    TenantSpec,
    WorkerRecord,
    masked_url,
)
from .store.endpoints import EndpointRecord
from .store.outbox import EndpointHealth, EventRow
from .store.rotation import (
    RotationProgress,
    RotationReport,
    TableRotation,
)
from .telemetry.figures import (
    Counters,
    Snapshot,
    TenantDepth,
)
from .telemetry.snapshot_view import (
    BRIEF_VIEW,
    BucketPick,
    BucketPicks,
    QueueTotals,
    SnapshotView,
)

__all__ = [
    "API_KEY_SCOPES",
    "BRIEF_VIEW",
    "BUILTIN_KINDS",
    "COMMON_OPTIONS",
    "DEFAULT_RETENTION",
    "EVENT_TYPES",
    "MASKED_VALUE",
    "MAX_KEY_CHARS",
    "MAX_PLANNED",
    "MAX_SUPPRESSION_PAGE",
    "PROVIDER_KINDS",
    "UNSET",
    "ApiKeyRecord",
    "AppliedConfig",
    "AuditEntry",
    "BacklogTraffic",
    "BucketKey",
    "BucketLevel",
    "BucketPick",
    "BucketPicks",
    "BurstTraffic",
    "Circuit",
    "CircuitState",
    "ClaimKind",
    "Clock",
    "ConfigError",
    "Conflict",
    "Counters",
    "CourierSettings",
    "DeliveryEntry",
    "DispatcherSettings",
    "EndpointHealth",
    "EndpointRecord",
    "EndpointView",
    "Engine",
    "EngineSettings",
    "EngineState",
    "EnqueueItem",
    "EnqueueResult",
    "EventRow",
    "EventType",
    "FakeClock",
    "ItemRefused",
    "Limit",
    "LimitChange",
    "Limiter",
    "LocalLimiter",
    "Message",
    "NewSecret",
    "NotCancellable",
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
    "PostAnswer",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "ProviderKind",
    "ProviderModel",
    "ProviderPlan",
    "ProviderRecord",
    "PruneReport",
    "QueueTotals",
    "RedisLimiter",
    "ReplayTraffic",
    "RequestClaim",
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
    "SuppressionRecord",
    "SystemClock",
    "TableRotation",
    "TenantDepth",
    "TenantImport",
    "TenantLimits",
    "TenantPage",
    "TenantPlan",
    "TenantQuery",
    "TenantRecord",
    "TenantSpec",
    "TokenBucket",
    "Traffic",
    "Unset",
    "Window",
    "WorkerRecord",
    "event_body",
    "event_names",
    "fmt_limit",
    "format_age",
    "is_text",
    "lifetimes",
    "limit_of",
    "load_json",
    "mask",
    "masked_secrets",
    "masked_url",
    "parse_age",
    "parse_duration",
    "parse_events",
    "parse_rate",
    "parse_scope",
    "parse_tenant_lines",
    "parse_time",
    "predicted_drain_s",
    "rate_text",
    "read_tenant_file",
    "read_text_lines",
    "rfc3339",
    "tenant_line",
    "worst_window",
]
