"""Small tenants beside large ones, at 10,000 tenants: do the few notifications of many tenants
wait behind the deep backlogs of a few?

The population of ``bench/tenants.py`` (every tenant at 20/s, burst 10; three ``simulated``
providers of 5 ms sharing 2,000/s): ``--big`` tenants (100) with a backlog on every provider
deep enough to keep the providers busy all run (they alone may send 2,000/s), and the others
(9,900) with ``--few`` notifications (2) each, on one provider (tenant i on provider i mod 3).
Everything is written before one ``omnipost worker --concurrency 32`` starts (with its progress
lines, as an operator runs it). The small tenants' wait is from the worker's start to each of
their deliveries (``delivery_log``). Two runs side by side on fresh stores: the big tenants
busy, and the big tenants idle (no backlog): the small ones' p50 / p95 / max wait in each, and
the ratio of the p95s. Prints JSON.

    .venv/bin/python bench/mixed.py [--tenants 10000] [--big 100] [--few 2] [--duration 20]
        [--stores sqlite,postgres] [--out FILE]
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from _common import asyncpg_dsn, emit, fresh_pg, log_level_warning, parser, pg_reachable
from tenants import CONCURRENCY, PROVIDER_LIMIT, PROVIDERS, TENANT_LIMIT

from engine import (
    BUILTIN_KINDS,
    Engine,
    EnqueueItem,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
    TenantSpec,
)
from testkit.cli import REPO, clean_env


def small_name(i: int) -> str:
    return f"s{i:05d}"


async def prepare(url: str, key: str, args: Any, *, busy: bool) -> None:
    """The providers, every tenant, the small ones' notifications and (``busy``) the big ones'
    backlogs: 1.3 x what the providers can take in the run, over the big tenants' keys."""
    small = args.tenants - args.big
    deep = int(PROVIDER_LIMIT.rate_per_s * args.duration * 1.3 / args.big) + 1
    async with Store(url, SecretBox([key])) as store:
        await store.migrate()
        async with Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
            for name in PROVIDERS:
                await engine.provider_add(name, "simulated", PROVIDER_LIMIT, {"latency_ms": "5"})
            specs = [TenantSpec(f"b{i:03d}", TENANT_LIMIT) for i in range(args.big)]
            specs += [TenantSpec(small_name(i), TENANT_LIMIT) for i in range(small)]
            await engine.tenant_import(specs)
            for i in range(small):
                provider = PROVIDERS[i % len(PROVIDERS)]
                items = [
                    EnqueueItem(provider, "u@example.com", {"j": j}, f"s-{j}", 0)
                    for j in range(args.few)
                ]
                await engine.enqueue_many(small_name(i), items)
            for i in range(args.big if busy else 0):
                items = [
                    EnqueueItem(p, "u@example.com", {"j": j}, f"{p}-{j}", 0)
                    for p in PROVIDERS
                    for j in range(deep)
                ]
                await engine.enqueue_many(f"b{i:03d}", items)


def run_worker(url: str, key: str, duration_s: float) -> float:
    """One worker for ``duration_s``; returns when it started (unix s)."""
    env = clean_env(Path(tempfile.mkdtemp(prefix="omnipost-mixed-")), OMNIPOST_KEYS=key)
    args = ["--db", url, "--concurrency", str(CONCURRENCY), "--duration", str(duration_s)]
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "app", "worker", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the worker failed:\n{done.stderr[-2000:]}")
    return started


_SMALL_DELIVERED = (
    "SELECT d.ts FROM delivery_log d JOIN tenants t ON t.id = d.tenant_id"
    " WHERE d.outcome = 'delivered' AND t.name LIKE 's%' ORDER BY d.ts"
)


async def small_delivered(url: str) -> list[float]:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [float(r[0]) for r in conn.execute(_SMALL_DELIVERED)]
    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=5)
    try:
        return [float(r[0]) for r in await conn.fetch(_SMALL_DELIVERED)]
    finally:
        await conn.close()


def waits(ts: list[float], started: float, expected: int) -> dict[str, Any]:
    """The small ones' waits from the worker's start, in s; p95 and max only when every one of
    the ``expected`` was delivered (else null: the run was too short to say)."""
    w = sorted(t - started for t in ts)
    whole = len(w) == expected
    return {
        "delivered": len(w),
        "of": expected,
        "p50_s": round(statistics.median(w), 3) if w else None,
        "p95_s": round(w[int(0.95 * (len(w) - 1))], 3) if whole else None,
        "max_s": round(w[-1], 3) if whole else None,
    }


async def one(store_kind: str, args: Any, tmp: Path, *, busy: bool) -> dict[str, Any]:
    key = SecretBox.generate_key()
    expected = (args.tenants - args.big) * args.few

    async def measure(url: str) -> dict[str, Any]:
        await prepare(url, key, args, busy=busy)
        started = await asyncio.to_thread(run_worker, url, key, args.duration)
        return waits(await small_delivered(url), started, expected)

    if store_kind == "sqlite":
        return await measure(f"sqlite:///{tmp / f'mixed-{busy}.db'}")
    async with fresh_pg(f"mixed{int(busy)}") as url:
        return await measure(url)


async def main(args: Any) -> dict[str, Any]:
    stores = args.stores.split(",")
    if "postgres" in stores and not await pg_reachable():
        raise SystemExit("bench/mixed.py --stores postgres needs PostgreSQL")
    runs = []
    with tempfile.TemporaryDirectory(prefix="omnipost-mixed-") as tmp:
        for store_kind in stores:
            idle = await one(store_kind, args, Path(tmp), busy=False)
            busy = await one(store_kind, args, Path(tmp), busy=True)
            ratio = (
                round(busy["p95_s"] / idle["p95_s"], 2)
                if busy["p95_s"] is not None and idle["p95_s"]
                else None
            )
            runs.append(
                {"store": store_kind, "big_idle": idle, "big_busy": busy, "p95_ratio": ratio}
            )
            print(runs[-1], file=sys.stderr)
    return {
        "benchmark": "mixed",
        "tenants": args.tenants,
        "big": args.big,
        "few": args.few,
        "duration_s": args.duration,
        "runs": runs,
    }


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--tenants", type=int, default=10_000)
    p.add_argument("--big", type=int, default=100)
    p.add_argument("--few", type=int, default=2)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--stores", default="sqlite,postgres")
    cli = p.parse_args()
    if not 0 < cli.big < cli.tenants or cli.few < 1 or cli.duration <= 0:
        raise SystemExit("--big must be between 0 and --tenants, --few and --duration above 0.")
    log_level_warning()
    emit(asyncio.run(main(cli)), cli.out)
