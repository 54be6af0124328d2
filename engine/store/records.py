"""Read models the store hands out: plain frozen values, safe to pass to the console.

The three made once or more per send (``Leased``, ``Completion``, ``DuePair``) and the two
made per row an enqueue takes (``NotificationRow``, ``EnqueueResult``) are values all the same,
never changed once made, but not frozen: a frozen dataclass sets each field through
``object.__setattr__``, which makes one about five times slower to build (1.1 against 0.2 us
for ``Leased``, 0.86 against 0.21 us for ``NotificationRow``), and a plan builds several per
send, an API batch one of each per row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.core.domain import Limit, Message, NotificationState, Outcome

__all__ = [
    "ApiKeyRecord",
    "AuditEntry",
    "Completion",
    "DeliveryEntry",
    "DepthRow",
    "DuePair",
    "Enqueue",
    "EnqueueResult",
    "Leased",
    "NotificationRow",
    "NotificationView",
    "PairLimit",
    "ProviderRecord",
    "SendSample",
    "Share",
    "StoreSize",
    "SuppressionRecord",
    "TenantPage",
    "TenantQuery",
    "TenantRecord",
    "WorkerRecord",
    "share_index",
]


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant: its dispatch ``limit``, for the HTTP API each key's request limit and the
    most it may hold queued (``None``: the server's defaults), and the deadline, in seconds
    after their send time, of its notifications that name none (``None``: the provider's)."""

    id: int
    name: str
    limit: Limit | None
    enabled: bool
    api_limit: Limit | None = None
    max_queued: int | None = None
    default_ttl_s: float | None = None


TENANT_SORTS = ("name", "rate", "burst", "enabled")


@dataclass(frozen=True, slots=True)
class TenantQuery:
    """One page of the tenants: those whose name contains ``match`` (case ignored), ordered
    by ``sort`` (one of ``TENANT_SORTS``; an unlimited rate or burst after every number, then
    by name), ``limit`` of them from ``offset``."""

    match: str = ""
    sort: str = "name"
    descending: bool = False
    offset: int = 0
    limit: int = 200


@dataclass(frozen=True, slots=True)
class TenantPage:
    """The tenants a ``TenantQuery`` asked for, and how many match it in all."""

    tenants: tuple[TenantRecord, ...]
    total: int
    query: TenantQuery


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """A provider's configuration. ``secrets`` holds plaintext values only when the store was
    asked for them (``with_secrets=True``); listings carry the names alone."""

    id: int
    name: str
    kind: str
    limit: Limit | None
    options: dict[str, str]
    secret_names: tuple[str, ...]
    secrets: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class PairLimit:
    tenant_id: int
    provider_id: int
    tenant: str
    provider: str
    limit: Limit


@dataclass(slots=True)  # a value; not frozen: see the module docstring
class NotificationRow:
    provider_id: int
    recipient: str = field(repr=False)
    payload: dict[str, Any]
    idempotency_key: str
    priority: int = 0
    max_attempts: int = 5
    available_at: float | None = None  # not claimed before (None: the enqueue's time)
    expires_at: float | None = None  # never sent after it (``expired`` instead)
    # Inserted ``scheduled`` (its ``available_at`` is its send time): not counted as queued,
    # and queued only when ``LifetimesRepo.promote`` finds it due.
    scheduled: bool = False


@dataclass(slots=True)  # a value; not frozen: see the module docstring
class EnqueueResult:
    id: int
    idempotency_key: str
    duplicate: bool
    # Inserted suppressed: its recipient is on the tenant's suppression list for its provider.
    suppressed: bool = False
    # As inserted (None for a duplicate: its own are in the store): its send time when it was
    # scheduled (None: due now), and its deadline (None: none).
    send_at: float | None = None
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class NotificationView:
    """A notification as shown to people: the recipient is masked."""

    id: int
    tenant_id: int
    provider_id: int
    recipient_masked: str
    payload: dict[str, Any]
    idempotency_key: str
    priority: int
    state: NotificationState
    attempt: int
    failures: int
    max_attempts: int
    available_at: float
    enqueued_at: float
    finished_at: float | None
    last_error: str | None
    expires_at: float | None = None


@dataclass(slots=True)  # a value; not frozen: see the module docstring
class Leased:
    """A notification leased to ``owner`` at ``attempt``; the recipient is plaintext for sending."""

    id: int
    tenant_id: int
    provider_id: int
    recipient: str = field(repr=False)
    payload: dict[str, Any]
    idempotency_key: str
    attempt: int
    failures: int
    max_attempts: int
    enqueued_at: float
    owner: str
    lease_expires_at: float
    expires_at: float | None = None  # its deadline (unix s): never sent after it
    # When it was due, as claimed (its ``available_at``): for a scheduled notification's first
    # attempt, its send time, from which its lateness is counted.
    due_at: float | None = None

    def message(self, tenant: str, provider: str, now: float) -> Message:
        """What the provider is given to send at ``now`` (wall s): with a deadline, what is
        left of it."""
        expires_at = self.expires_at
        return Message(  # by position (made per send): notification_id, tenant, provider,
            self.id,  # recipient, payload, idempotency_key, attempt, delivery_attempt,
            tenant,  # expires_at, ttl_s
            provider,
            self.recipient,
            self.payload,
            self.idempotency_key,
            self.attempt,
            self.failures + 1,
            expires_at,
            None if expires_at is None else max(0.0, expires_at - now),
        )


@dataclass(slots=True)  # a value; not frozen: see the module docstring
class Completion:
    """What to write back for one leased notification; applied only if the lease still holds."""

    leased: Leased
    outcome: Outcome
    state: NotificationState
    detail: str = ""
    available_at: float | None = None  # for a requeue
    spend_attempt: bool = False
    ts: float = 0.0
    latency_s: float | None = None  # enqueue to outcome
    send_s: float | None = None  # how long the provider took (None: it was not called)
    gone: bool = False  # the provider said the recipient is gone for good: suppress it


_HASH = 2654435761  # Knuth's multiplicative hash: 2**32 over the golden ratio


def share_index(tenant_id: int, workers: int) -> int:
    """Which of ``workers`` (counted in the order of their ids) serves ``tenant_id``: the id's
    32-bit multiplicative hash scaled to their number, so consecutive ids spread evenly. The
    store's read of the counts computes the same in SQL (``Share``)."""
    return (tenant_id * _HASH % 4294967296) * workers >> 32


@dataclass(frozen=True, slots=True)
class Share:
    """One worker's part of the tenants: those whose ``share_index`` among ``workers`` is
    ``index``, and every key with at least ``deep`` rows queued (served by all)."""

    index: int
    workers: int
    deep: int


@dataclass(slots=True)  # a value; not frozen: see the module docstring
class DuePair:
    """A key with queued work: ``due`` rows due now, counted up to a cap (at least a batch
    tells the dispatcher enough), and the ``available_at`` of its earliest queued row."""

    tenant_id: int
    provider_id: int
    due: int
    next_available_at: float
    # Its queued rows in the kept counts, when the look read them (not part of its value).
    queued: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class DepthRow:
    """How many of a tenant's notifications are in ``state``; for queued ones, also when the
    oldest was enqueued (None for the other states)."""

    tenant_id: int
    state: NotificationState
    count: int
    oldest_enqueued_at: float | None


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    state: str
    concurrency: int
    delivered: int


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    ts: float
    actor: str
    action: str
    tenant_id: int | None
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeliveryEntry:
    id: int
    notification_id: int
    tenant_id: int
    provider_id: int
    attempt: int
    outcome: Outcome
    detail: str
    worker: str
    ts: float
    latency_s: float | None
    send_s: float | None = None  # the provider's own time (None: not called, or before 0005)


@dataclass(frozen=True, slots=True)
class StoreSize:
    """The store on disk: ``used_bytes`` (SQLite: the file and its write-ahead log; Postgres:
    OmniPost's tables with their indexes), ``free_bytes`` of it reusable (SQLite's free pages;
    None on Postgres), and ``notifications`` kept, in every state."""

    used_bytes: int
    free_bytes: int | None
    notifications: int


@dataclass(frozen=True, slots=True)
class SendSample:
    """One send from the delivery log: its provider, outcome, the provider's own time
    (None before migration 0005 or when the provider was not called) and when it ended."""

    provider_id: int
    outcome: Outcome
    send_s: float | None
    ts: float


@dataclass(frozen=True, slots=True)
class Enqueue:
    """When a notification of one key was enqueued, and its priority."""

    enqueued_at: float
    tenant_id: int
    provider_id: int
    priority: int


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """A tenant's API key as listings show it: never the key, only its public ``prefix``.
    ``scope``: what it may do (``send``, ``read``); times are unix seconds, ``last_used_at``
    and ``revoked_at`` None until then."""

    id: int
    tenant: str
    prefix: str
    name: str
    scope: tuple[str, ...]
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class SuppressionRecord:
    """One suppressed recipient, as shown to people: masked."""

    id: int
    tenant: str
    provider: str
    recipient_masked: str
    reason: str
    source: str  # provider (its answer said so) or operator (added by hand or imported)
    created_at: float
    notification_id: int | None
