"""Run commands: a worker that dispatches, a simulated burst, and the demo. Each runs until
its work is done, its time is up, or SIGINT/SIGTERM, then stops the engine cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.commands.base import open_engine
from app.demo import seed_demo
from app.metrics import METRICS_VIEW, MetricsAddress, MetricsExporter
from app.progress import FINAL_VIEW, report_progress, summary_line, work_line
from app.session import Context, on_signals
from app.wiring import build_store, loaded_frozen
from engine import Circuit, ConfigError, Engine, OmniPostError, Pattern, masked_url

__all__ = ["Burst", "WorkerRun", "demo", "simulate", "worker"]


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """How ``worker`` runs: until the queue is empty, for ``duration_s``, or until stopped."""

    concurrency: int = 16
    lease_s: float = 30.0
    prefetch: int | None = None  # None: one batch ahead
    until_empty: bool = False
    duration_s: float | None = None
    quiet: bool = False
    redis_url: str | None = None
    metrics: MetricsAddress | None = None  # where to serve Prometheus metrics, if anywhere
    serve_port: int | None = None  # where to serve the HTTP API too, if anywhere
    # An endpoint failing every status event this long is disabled (None: five days).
    webhooks_disabled_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Burst:
    """What ``simulate`` enqueues (``count`` for each tenant) and how it dispatches it."""

    tenants: Sequence[str]
    provider: str
    count: int
    pattern: Pattern = Pattern.SPIKE
    duration_s: float = 0.0
    concurrency: int = 16
    dispatch: bool = True
    redis_url: str | None = None


async def worker(ctx: Context, run: WorkerRun) -> int:
    """Dispatch until done; exit 1 when the engine stopped on a failure. The metrics address
    is bound first, so that a taken port fails before anything is leased."""
    start = time.monotonic()
    serving = _serving(run.serve_port)
    async with (
        MetricsExporter(run.metrics, extra=serving.metrics) as metrics,
        open_engine(
            ctx,
            concurrency=run.concurrency,
            lease_s=run.lease_s,
            prefetch=run.prefetch,
            redis_url=run.redis_url,
            webhooks_disabled_after_s=run.webhooks_disabled_after_s,
        ) as engine,
        metrics.following(functools.partial(engine.snapshot, view=METRICS_VIEW)),
        serving.on(engine) as api_url,
    ):
        # What the engine loaded lives as long as the worker: out of the collector's rounds
        # (a command that ends at once gains nothing from it: app.cli freezes at exit), and
        # the collector runs less often while it dispatches.
        with loaded_frozen(collect_rarely=True):
            await engine.start()
            if not run.quiet:
                api = f", the API on {api_url}" if api_url else ""
                print(
                    f"worker {engine.worker_id} on {masked_url(ctx.db_url)}, "
                    f"concurrency {run.concurrency}{metrics.says()}{api}",
                    file=sys.stderr,
                )
            waits: list[asyncio.Future[Any]] = []
            held: asyncio.Future[tuple[Circuit, ...]] | None = None
            if run.until_empty:
                held = asyncio.ensure_future(_held_by_circuits(engine))
                waits += [asyncio.ensure_future(engine.run_until_empty()), held]
            if run.duration_s:
                waits.append(asyncio.ensure_future(asyncio.sleep(run.duration_s)))
            await _run_until(engine, waits, quiet=run.quiet)
            await engine.stop()
            snap = await engine.snapshot(view=FINAL_VIEW)
    print(summary_line(snap, time.monotonic() - start))
    if not run.quiet:
        print(work_line(snap), file=sys.stderr)
    if engine.failure:
        print(f"omnipost: the worker stopped: {engine.failure}", file=sys.stderr)
        return 1
    if held is not None and held.done() and not held.cancelled():
        print(f"omnipost: {held_sentence(held.result())}", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True, slots=True)
class _Serving:
    """The HTTP API beside a worker (``--serve PORT``), or nothing when ``port`` is None."""

    port: int | None
    metrics: Any = None  # the API's collector for the metrics endpoint

    def on(self, engine: Engine) -> contextlib.AbstractAsyncContextManager[str | None]:
        if self.port is None:
            return contextlib.nullcontext(None)
        from app.serve import embedded  # uvicorn and the API: only when asked for

        return embedded(engine, self.port, metrics=self.metrics)


def _serving(port: int | None) -> _Serving:
    if port is None:
        return _Serving(None)
    from api import ApiMetrics

    return _Serving(port, ApiMetrics())


async def _held_by_circuits(engine: Engine, poll_s: float = 1.0) -> tuple[Circuit, ...]:
    """Wait until all the work left is held by open circuits (``--until-empty`` then stops
    rather than wait for a provider that may never come back)."""
    while True:
        await asyncio.sleep(poll_s)
        try:
            held = await engine.circuit_holds()
        except OmniPostError:  # the store is away; the engine copes, and so does this check
            continue
        if held:
            return held


def held_sentence(held: Sequence[Circuit]) -> str:
    """One sentence for a queue that is left waiting on providers whose circuit is open."""
    names = ", ".join(h.provider for h in held)
    which = "provider" if len(held) == 1 else "providers"
    why = f" (last error: {held[0].last_error})" if len(held) == 1 and held[0].last_error else ""
    resume = held[0].provider if len(held) == 1 else "NAME"
    return (
        f"stopped with notifications still queued: {which} {names} unavailable, circuit "
        f"open{why}; they stay queued and spend no attempt. Fix the provider, then "
        f"`omnipost provider resume {resume}` or run the worker again."
    )


async def simulate(ctx: Context, burst: Burst) -> int:
    """Enqueue ``burst`` and, unless told not to, dispatch until it is delivered."""
    if not burst.tenants:
        raise ConfigError("name at least one tenant.")
    start = time.monotonic()
    async with open_engine(ctx, concurrency=burst.concurrency, redis_url=burst.redis_url) as engine:
        # Every name is checked before the engine starts, so bad input dispatches nothing.
        await engine.names_check(tenants=burst.tenants, providers=[burst.provider])
        if burst.dispatch:
            await engine.start()
        sim = asyncio.ensure_future(
            engine.simulate(
                burst.tenants,
                burst.provider,
                burst.count,
                pattern=burst.pattern,
                duration_s=burst.duration_s,
            )
        )
        waits: list[asyncio.Future[Any]] = [sim]
        if burst.dispatch:
            waits = [asyncio.ensure_future(_after(sim, engine.run_until_empty))]
        await _run_until(engine, waits, quiet=False)
        if sim.done() and not sim.cancelled() and sim.exception() is not None:
            raise sim.exception()  # type: ignore[misc]
        await engine.stop()
        snap = await engine.snapshot(view=FINAL_VIEW)
    print(summary_line(snap, time.monotonic() - start))
    return 1 if engine.failure else 0


async def demo(ctx: Context, count: int) -> int:
    """Create demo tenants and simulated providers (once), then run a live burst."""
    async with build_store(ctx.db_url, ctx.box) as store:
        await store.migrate()
    async with open_engine(ctx, concurrency=32) as engine:
        await seed_demo(engine)
    print(
        "demo: tenants acme (50/s), globex (20/s), initech (unlimited); provider sms-sim (60/s)",
        file=sys.stderr,
    )
    burst = Burst(("acme", "globex", "initech"), "sms-sim", count, concurrency=32)
    return await simulate(ctx, burst)


async def _run_until(engine: Engine, waits: list[asyncio.Future[Any]], *, quiet: bool) -> None:
    """Wait for the first of ``waits``, a signal, or the engine stopping; then cancel the
    rest. Prints progress lines meanwhile unless ``quiet``."""
    stop = asyncio.Event()
    with on_signals(stop.set):
        tasks = [
            *waits,
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(engine.wait_stopped()),
        ]
        # Progress is not waited on: it runs until cancelled, and its failing ends nothing.
        side = [] if quiet else [asyncio.ensure_future(report_progress(engine))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, *side]:
                task.cancel()
            await asyncio.gather(*tasks, *side, return_exceptions=True)


async def _after(first: asyncio.Future[Any], then: Callable[[], Awaitable[Any]]) -> Any:
    await first
    return await then()
