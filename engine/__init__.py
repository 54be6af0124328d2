"""OmniPost's engine: rate-limited, leased, at-least-once notification dispatch. No Qt here.

The console and the CLI drive it through these names::

    async with Engine(Store(url, box), LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
        await engine.start()
        await engine.enqueue("acme", "sms", "+15551234567", {"text": "hi"})
        snapshot = await engine.snapshot()
        await engine.stop()
"""

from engine.clock import Clock, FakeClock, SystemClock
from engine.crypto import SecretBox, mask
from engine.dispatcher import DispatcherSettings
from engine.domain import (
    BucketKey,
    BucketLevel,
    Limit,
    Message,
    NotificationState,
    Outcome,
    SendResult,
    parse_rate,
)
from engine.engine import Engine, EngineSettings, EngineState, SimulationProgress
from engine.errors import (
    ConfigError,
    Conflict,
    NotFound,
    OmniPostError,
    StoreError,
    StoreUnavailable,
)
from engine.limiter import Limiter, Reservation
from engine.local_limiter import LocalLimiter
from engine.policy import RetryPolicy
from engine.providers import BUILTIN_KINDS, Provider, ProviderConfig, ProviderFactory
from engine.ratelimit import TokenBucket
from engine.retention import DEFAULT_RETENTION, PruneReport, Retention, format_age, parse_age
from engine.simulate import Pattern, predicted_drain_s
from engine.store import (
    NotificationView,
    ProviderRecord,
    Store,
    StoreSize,
    TenantRecord,
    WorkerRecord,
    masked_url,
)
from engine.telemetry import Counters, Snapshot, TenantDepth

__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_RETENTION",
    "BucketKey",
    "BucketLevel",
    "Clock",
    "ConfigError",
    "Conflict",
    "Counters",
    "DispatcherSettings",
    "Engine",
    "EngineSettings",
    "EngineState",
    "FakeClock",
    "Limit",
    "Limiter",
    "LocalLimiter",
    "Message",
    "NotFound",
    "NotificationState",
    "NotificationView",
    "OmniPostError",
    "Outcome",
    "Pattern",
    "Provider",
    "ProviderConfig",
    "ProviderFactory",
    "ProviderRecord",
    "PruneReport",
    "Reservation",
    "Retention",
    "RetryPolicy",
    "SecretBox",
    "SendResult",
    "SimulationProgress",
    "Snapshot",
    "Store",
    "StoreError",
    "StoreSize",
    "StoreUnavailable",
    "SystemClock",
    "TenantDepth",
    "TenantRecord",
    "TokenBucket",
    "WorkerRecord",
    "format_age",
    "mask",
    "masked_url",
    "parse_age",
    "parse_rate",
    "predicted_drain_s",
]
