"""The composition root: the one place that names concrete store, limiter and providers."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator

from engine import (
    BUILTIN_KINDS,
    ConfigError,
    DispatcherSettings,
    Engine,
    EngineSettings,
    Limiter,
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
    prefetch: int | None = None,
    actor: str = "cli",
    redis_url: str | None = None,
    webhooks_disabled_after_s: float | None = None,
) -> Engine:
    """An engine on ``store``; its buckets live in Redis at ``redis_url`` when one is given
    (shared by every process there), else in this process."""
    clock = SystemClock()
    dispatch = DispatcherSettings(concurrency=concurrency, lease_s=lease_s, prefetch=prefetch)
    settings = EngineSettings(dispatch=dispatch)
    if webhooks_disabled_after_s is not None and settings.events is not None:
        events = dataclasses.replace(settings.events, disable_after_s=webhooks_disabled_after_s)
        settings = dataclasses.replace(settings, events=events)
    limiter: Limiter = LocalLimiter(clock)
    if redis_url:
        try:
            from engine import RedisLimiter
        except ImportError as exc:  # redis is an optional dependency
            raise ConfigError(
                "--redis needs the redis package: pip install 'omnipost[redis]'."
            ) from exc
        # When Redis is down each worker falls back to its share of every limit, every bucket
        # empty: the limit divided by the live workers the engine counts from heartbeats, or
        # by the processes Redis saw reserving in the last 10 s when that is more
        # (engine/limits/redis_fallback.py).
        limiter = RedisLimiter(
            redis_url, clock=clock, fallback_workers=lambda: built[0].live_workers if built else 1
        )
    built: list[Engine] = []
    engine = Engine(
        store,
        limiter,
        BUILTIN_KINDS,
        clock=clock,
        settings=settings,
        actor=actor,
        limiter_backend="redis" if redis_url else "local",
    )
    built.append(engine)
    return engine


# A worker's collector: young collections ten times rarer, and the oldest generation's a
# tenth as often. At 100,000 tenants a worker made 19 collections of the oldest generation
# in a 40 s run (2.6 s, up to 0.31 s at once with its loop stalled: the objects its sends
# keep, as routes and the book's entries); none with these, 0.9 s in the younger ones.
RARE_COLLECTIONS = (7_000, 20, 100)


@contextlib.contextmanager
def loaded_frozen(
    *, own_process: bool | None = None, collect_rarely: bool = False
) -> Iterator[None]:
    """In a process that is the program's own, every object it holds on entering (an engine
    just opened: its configuration, about a million objects at 100,000 tenants, living as long
    as the engine) is taken out of the cyclic collector's rounds for good (``gc.freeze``, after
    one collection: no garbage is kept that way). Each collection of the oldest generation
    walked them all: a worker at 100,000 tenants spent 2.8 s of a 46 s run there, up to 0.72 s
    at once with its loop stalled; 2.1 s and 0.26 s with them frozen. With ``collect_rarely``
    (a worker), the collector also runs at ``RARE_COLLECTIONS`` until the block ends: 0.72 of
    the limits at 100,000 tenants went to 0.89, its CPU per delivery from 0.40 to 0.31 ms.
    ``own_process``: by default, whether ``omnipost`` froze its modules as they loaded
    (``app.cli``, which freezes the heap at exit as well); a caller that runs a command in its
    own process (the tests) keeps its collector as it was."""
    if own_process is None:
        own_process = gc.get_freeze_count() > 0
    before = gc.get_threshold()
    if own_process and gc.isenabled():
        gc.collect()
        gc.freeze()
        if collect_rarely:
            gc.set_threshold(*RARE_COLLECTIONS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
