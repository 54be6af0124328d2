"""The composition root: the one place that names concrete store, limiter and providers."""

from __future__ import annotations

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)

__all__ = ["build_engine", "build_store"]


def build_store(url: str, box: SecretBox) -> Store:
    return Store(url, box)


def build_engine(
    store: Store,
    *,
    concurrency: int = 16,
    lease_s: float = 30.0,
    actor: str = "cli",
) -> Engine:
    clock = SystemClock()
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=concurrency, lease_s=lease_s))
    return Engine(
        store,
        LocalLimiter(clock),
        BUILTIN_KINDS,
        clock=clock,
        settings=settings,
        actor=actor,
        limiter_backend="local",
    )
