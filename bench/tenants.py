"""Throughput against the limits as the tenants grow: 10, 100, 1,000 and 10,000 tenants.

N tenants at 20/s (burst 10); three ``simulated`` providers (5 ms) sharing 2,000/s (667/s
each, burst 50); a backlog spread evenly over every (tenant, provider), deep enough to last the
run; one ``omnipost worker --concurrency 32 --duration D`` process, with its progress line
every second as an operator runs it (``--quiet`` passes it on, to compare). Measured: the
steady rate over the second half of its deliveries (from ``delivery_log``) against what the
limits allow, ``min(N x 20/s, 2,000/s)``, and the worker's CPU seconds per delivered
notification (its rusage). The tenants and the backlog are written before the worker starts
(not timed).

    .venv/bin/python bench/tenants.py [--tenants 10,100,1000,10000] [--stores sqlite,postgres]
        [--limiter local,redis] [--duration 16] [--quiet] [--repeat 1] [--idle 0] [--out FILE]
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
from _common import REDIS, asyncpg_dsn, emit, fresh_pg, log_level_warning, parser, pg_reachable
from _procs import peak_rss_mb

from engine import (
    BUILTIN_KINDS,
    Engine,
    EnqueueItem,
    Limit,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
    TenantSpec,
)
from engine.limits.envelope import worst_window
from testkit.cli import REPO, clean_env

TENANT_LIMIT = Limit(20.0, 10.0)
PROVIDERS = ("sim-a", "sim-b", "sim-c")
PROVIDER_LIMIT = Limit(2000.0 / len(PROVIDERS), 50.0)
CONCURRENCY = 32


def allowed_per_s(tenants: int) -> float:
    return min(tenants * TENANT_LIMIT.rate_per_s, PROVIDER_LIMIT.rate_per_s * len(PROVIDERS))


async def prepare(
    url: str, key: str, tenants: int, duration_s: float, idle: int = 0
) -> dict[str, Any]:
    """Migrate; add the providers, the tenants and a backlog of 1.3 x what the run can send,
    and ``idle`` more tenants with nothing queued (their keys cost memory, never work)."""
    per_key = math.ceil(allowed_per_s(tenants) * duration_s * 1.3 / (tenants * 3))
    t0 = time.perf_counter()
    async with Store(url, SecretBox([key])) as store:
        await store.migrate()
        async with Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
            for name in PROVIDERS:
                await engine.provider_add(name, "simulated", PROVIDER_LIMIT, {"latency_ms": "5"})
            await _add_tenants(engine, tenants)
            await engine.tenant_import(
                [TenantSpec(f"idle{i:06d}", TENANT_LIMIT) for i in range(idle)]
            )
            setup_s = time.perf_counter() - t0
            for i in range(tenants):
                items = [
                    EnqueueItem(p, f"user{j}@example.com", {"j": j}, f"{p}-{j}", 0)
                    for p in PROVIDERS
                    for j in range(per_key)
                ]
                await engine.enqueue_many(f"t{i:05d}", items)
    return {
        "backlog": per_key * tenants * 3,
        "setup_s": round(setup_s, 1),
        "fill_s": round(time.perf_counter() - t0 - setup_s, 1),
    }


async def _add_tenants(engine: Engine, tenants: int) -> None:
    specs = [TenantSpec(f"t{i:05d}", TENANT_LIMIT) for i in range(tenants)]
    await engine.tenant_import(specs)


def run_worker(
    url: str, key: str, redis_url: str | None, duration_s: float, *, quiet: bool
) -> dict[str, Any]:
    """One worker for ``duration_s`` (``quiet``: without its progress lines); returns its CPU
    seconds and how many progress lines it printed."""
    env = clean_env(Path(tempfile.mkdtemp(prefix="omnipost-tenants-")), OMNIPOST_KEYS=key)
    args = ["--db", url, "--concurrency", str(CONCURRENCY), "--duration", str(duration_s)]
    if redis_url:
        args += ["--redis", redis_url]
    command = [sys.executable, "-m", "app", "worker", *(["--quiet"] if quiet else []), *args]
    proc = subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    peak: list[float] = []  # the worker's own high-water mark, read while it lives

    def watch() -> None:
        while proc.poll() is None:
            found = peak_rss_mb(proc.pid)
            if found is not None:
                peak.append(found)
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output = proc.stdout.read().decode(errors="replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    watcher.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the worker failed:\n{output}")
    lines = sum(1 for line in output.splitlines() if line.startswith("[") and "delivered" in line)
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "progress_lines": lines,
        # Not ``usage.ru_maxrss``: Linux carries this process's own size over into the child's.
        "rss_mb": max(peak, default=0.0),
    }


async def deliveries(url: str) -> list[tuple[int, int, float]]:
    """(tenant id, provider id, when the provider was called) of every delivery: the logged
    time less the provider's own time (``send_s``), read straight from ``delivery_log``."""
    query = (
        "SELECT tenant_id, provider_id, ts - COALESCE(send_s, 0) FROM delivery_log"
        " WHERE outcome = 'delivered'"
    )
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [(int(r[0]), int(r[1]), float(r[2])) for r in conn.execute(query)]
    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=5)
    try:
        return [(int(r[0]), int(r[1]), float(r[2])) for r in await conn.fetch(query)]
    finally:
        await conn.close()


def over_envelope(sent: Sequence[tuple[int, int, float]]) -> dict[str, Any]:
    """Each tenant's and each provider's sends, at the provider's side, against the envelope
    ``burst + rate * (W + 0.02) + 1`` (the provider-side bound of docs/benchmarks.md §3) for
    windows of 0.1, 1 and 5 s: how many tenants and providers went over it, and the fullest
    window relative to its bound."""
    by_tenant: dict[int, list[float]] = {}
    by_provider: dict[int, list[float]] = {}
    for tenant, provider, at in sent:
        by_tenant.setdefault(tenant, []).append(at)
        by_provider.setdefault(provider, []).append(at)
    worst = 0.0
    over = {"tenants": 0, "providers": 0}
    first = min((at for _t, _p, at in sent), default=0.0)
    where: list[dict[str, Any]] = []  # the windows over it: which, when (from the first send)
    for what, groups, limit in (
        ("tenants", by_tenant, TENANT_LIMIT),
        ("providers", by_provider, PROVIDER_LIMIT),
    ):
        for key, times in groups.items():
            times.sort()
            windows = [
                worst_window(times, w, limit.rate_per_s, limit.burst, lag_s=0.02)
                for w in (0.1, 1.0, 5.0)
            ]
            over[what] += any(not w.holds for w in windows)
            worst = max(worst, *(w.count / w.allowed for w in windows))
            where += [
                {
                    "what": f"{what[:-1]} {key}",
                    "window_s": w.window_s,
                    "at_s": round(w.start - first, 3),
                    "count": w.count,
                    "allowed": round(w.allowed, 1),
                }
                for w in windows
                if not w.holds
            ][:3]
    return {"over_envelope": over, "fullest_window_of_bound": round(worst, 3), "over_at": where}


def steady_rate(ts: Sequence[float]) -> float:
    """Deliveries per second over the second half of the span of ``ts``."""
    if len(ts) < 4:
        return 0.0
    mid = ts[0] + (ts[-1] - ts[0]) / 2
    late = [t for t in ts if t >= mid]
    return len(late) / max(ts[-1] - mid, 1e-9)


async def one_run(
    store_kind: str,
    tenants: int,
    limiter: str,
    duration_s: float,
    tmp: Path,
    *,
    quiet: bool,
    repeat: int = 0,
    idle: int = 0,
) -> dict[str, Any]:
    key = SecretBox.generate_key()
    redis_url = REDIS if limiter == "redis" else None
    if redis_url:
        await _flush_redis(redis_url)
    if store_kind == "sqlite":
        url = f"sqlite:///{tmp / f'tenants-{tenants}-{limiter}-{repeat}.db'}"
        return await _measure(url, key, tenants, redis_url, duration_s, quiet=quiet, idle=idle)
    async with fresh_pg(f"tenants{tenants}") as url:
        return await _measure(url, key, tenants, redis_url, duration_s, quiet=quiet, idle=idle)


async def _measure(
    url: str,
    key: str,
    tenants: int,
    redis_url: str | None,
    duration_s: float,
    *,
    quiet: bool,
    idle: int = 0,
) -> dict[str, Any]:
    prepared = await prepare(url, key, tenants, duration_s, idle)
    worker = await asyncio.to_thread(
        functools.partial(run_worker, url, key, redis_url, duration_s, quiet=quiet)
    )
    sent = await deliveries(url)
    ts = sorted(t for _tenant, _provider, t in sent)
    rate = steady_rate(ts)
    allowed = allowed_per_s(tenants)
    return {
        **prepared,
        "delivered": len(ts),
        "steady_per_s": round(rate),
        "allowed_per_s": round(allowed),
        "ratio": round(rate / allowed, 3),
        "cpu_ms_per_delivered": round(worker["cpu_s"] * 1000 / max(len(ts), 1), 3),
        "progress_lines": worker["progress_lines"],
        "rss_mb": round(worker["rss_mb"], 1),
        "idle_tenants": idle,
        **over_envelope(sent),
    }


async def _flush_redis(url: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        async for name in client.scan_iter(match="omnipost:*", count=1000):
            await client.delete(name)
    finally:
        await client.aclose()


async def main(args: Any) -> dict[str, Any]:
    counts = [int(n) for n in args.tenants.split(",")]
    stores = args.stores.split(",")
    if "postgres" in stores and not await pg_reachable():
        raise SystemExit("bench/tenants.py --stores postgres needs PostgreSQL")
    each: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="omnipost-tenants-") as tmp:
        for repeat in range(args.repeat):  # outermost: the repeats of a size are spread in time
            for limiter in args.limiter.split(","):
                for store_kind in stores:
                    for n in counts:
                        run = await one_run(
                            *(store_kind, n, limiter, args.duration, Path(tmp)),
                            quiet=args.quiet,
                            repeat=repeat,
                            idle=args.idle,
                        )
                        each.append({"store": store_kind, "limiter": limiter, "tenants": n, **run})
                        print(each[-1], file=sys.stderr)
    return {
        "benchmark": "tenants",
        "duration_s": args.duration,
        "progress_lines": not args.quiet,
        "tenant_limit": {"rate_per_s": TENANT_LIMIT.rate_per_s, "burst": TENANT_LIMIT.burst},
        "providers": len(PROVIDERS),
        "provider_limit": {
            "rate_per_s": round(PROVIDER_LIMIT.rate_per_s, 1),
            "burst": PROVIDER_LIMIT.burst,
        },
        "concurrency": CONCURRENCY,
        "repeat": args.repeat,
        "runs": summed_runs(each),
    }


def summed_runs(each: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (store, limiter, tenants): the median repeat's figures (by ratio), with
    every repeat's ratio and CPU per delivery, and the largest RSS."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for run in each:
        groups.setdefault((run["store"], run["limiter"], run["tenants"]), []).append(run)
    rows = []
    for runs in groups.values():
        ranked = sorted(runs, key=lambda r: r["ratio"])
        rows.append(
            {
                **ranked[len(ranked) // 2],
                "ratios": [r["ratio"] for r in runs],
                "cpu_ms": [r["cpu_ms_per_delivered"] for r in runs],
                "rss_mb": max(r["rss_mb"] for r in runs),
            }
        )
    return rows


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--tenants", default="10,100,1000,10000")
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--limiter", default="local,redis")
    p.add_argument("--duration", type=float, default=16.0)
    p.add_argument("--quiet", action="store_true", help="the worker prints no progress lines")
    p.add_argument("--repeat", type=int, default=1, help="runs of each size (ranges quoted)")
    p.add_argument("--idle", type=int, default=0, help="more tenants with nothing queued")
    cli = p.parse_args()
    log_level_warning()
    emit(asyncio.run(main(cli)), cli.out)
