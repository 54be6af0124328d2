"""The dispatcher's settings: how many sends at once, how much per claim, and its timings."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.policy import RetryPolicy

__all__ = ["DispatcherSettings"]


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    concurrency: int = 16
    batch: int = 32  # most leases taken for one pair in one visit
    # Leases taken ahead of the free senders, for pairs that no limit paces: a slow provider
    # would otherwise shrink each claim to the senders free at that instant. None: one batch
    # (``ahead``); 0: none ahead.
    prefetch: int | None = None
    lease_s: float = 30.0
    poll_s: float = 0.5  # longest sleep without a wake-up
    send_timeout_s: float = 60.0  # a provider call longer than this is a transient failure
    stop_timeout_s: float = 10.0  # in-flight sends get this long to finish on stop
    completion_batch: int = 256
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    health_refresh_s: float = 2.0  # how often the providers' circuits are read from the store
    # A token older than this when its send starts (the process was held up in between) is
    # replaced by a fresh one: the provider never sees a send later than this after its token.
    token_lag_s: float = 0.01

    @property
    def ahead(self) -> int:
        """Leases a pair that no limit paces may hold waiting for a sender: ``prefetch``, or one
        batch, so that the next claim can be a whole batch while the senders work."""
        return self.batch if self.prefetch is None else self.prefetch
