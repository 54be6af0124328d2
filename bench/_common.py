"""Helpers shared by the bench scripts: servers, fresh databases, an engine to drain, JSON out.

Not a benchmark itself (the leading underscore keeps ``report.py`` from running it). Every
server is on loopback; every database or key prefix a script makes is fresh and removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    Limit,
    Limiter,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)

PG_ADMIN = os.environ.get("OMNIPOST_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("OMNIPOST_REDIS", "redis://127.0.0.1:6379/0")
PEERS = ("procrastinate", "pgqueuer", "aiolimiter", "limits", "pyrate-limiter", "asyncpg", "redis")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with ``--out FILE`` (write the JSON there too) and ``--quick``."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the JSON to this file")
    return p


def emit(report: dict[str, Any], out: Path | None) -> None:
    """Print ``report`` as JSON, with the machine it ran on, and write it to ``out`` too."""
    report = {**report, "machine": machine(), "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for name in PEERS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "packages": versions,
    }


def median(samples: Sequence[float], digits: int = 1) -> float:
    return round(statistics.median(samples), digits)


def spread(samples: Sequence[float], digits: int = 1) -> dict[str, Any]:
    """Median, min and max of a few repeats, and the samples themselves."""
    return {
        "median": median(samples, digits),
        "min": round(min(samples), digits),
        "max": round(max(samples), digits),
        "samples": [round(s, digits) for s in samples],
    }


# -- Postgres ------------------------------------------------------------------------------


async def _admin(sql: str) -> None:
    import asyncpg

    url = make_url(PG_ADMIN)
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database, timeout=5
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_pg(tag: str, *, durable: bool = True) -> AsyncIterator[str]:
    """A new, empty Postgres database for one run (dropped after); yields its URL. With
    ``durable=False`` every session on it runs with ``synchronous_commit = off`` (set on
    this database only; the server's own settings are not touched)."""
    name = f"omnipost_bench_{tag}_{uuid.uuid4().hex[:8]}"
    await _admin(f'CREATE DATABASE "{name}"')
    if not durable:
        await _admin(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    try:
        yield make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def pg_version() -> str:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


async def pg_commit_ms(rounds: int = 50) -> float:
    """Milliseconds per durable single-row INSERT commit on the server: what each
    transaction pays for its WAL flush on this machine's disk."""
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    table = f"omnipost_bench_probe_{uuid.uuid4().hex[:8]}"
    try:
        await conn.execute(f"CREATE TABLE {table} (x int)")
        t0 = time.perf_counter()
        for _ in range(rounds):
            await conn.execute(f"INSERT INTO {table} VALUES (1)")
        return round((time.perf_counter() - t0) / rounds * 1000, 2)
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()


async def pg_reachable() -> bool:
    try:
        await pg_version()
    except Exception:  # noqa: BLE001 - whatever the failure, the answer is "skip Postgres"
        return False
    return True


def asyncpg_dsn(url: str) -> str:
    """A SQLAlchemy-style Postgres URL as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# -- the engine ----------------------------------------------------------------------------


@dataclass
class Bench:
    engine: Engine
    store: Store
    box: SecretBox


@asynccontextmanager
async def open_store(
    url: str, box: SecretBox | None = None
) -> AsyncIterator[tuple[Store, SecretBox]]:
    """A migrated store with a fresh key (or ``box``, to share keys with other processes)."""
    box = box or SecretBox([SecretBox.generate_key()])
    async with Store(url, box) as store:
        await store.migrate()
        yield store, box


def new_engine(
    store: Store,
    *,
    concurrency: int = 32,
    batch: int = 32,
    limiter: Limiter | None = None,
    limiter_backend: str = "local",
) -> Engine:
    settings = EngineSettings(dispatch=DispatcherSettings(concurrency=concurrency, batch=batch))
    return Engine(
        store,
        limiter or LocalLimiter(SystemClock()),
        BUILTIN_KINDS,
        settings=settings,
        limiter_backend=limiter_backend,
    )


@asynccontextmanager
async def open_engine(
    url: str,
    *,
    concurrency: int = 32,
    batch: int = 32,
    limiter: Limiter | None = None,
    limiter_backend: str = "local",
    provider_options: dict[str, str] | None = None,
) -> AsyncIterator[Bench]:
    """A migrated store and an opened (not started) engine with one provider, ``noop``: the
    simulated kind with no latency unless ``provider_options`` say otherwise."""
    async with open_store(url) as (store, box):
        engine = new_engine(
            store,
            concurrency=concurrency,
            batch=batch,
            limiter=limiter,
            limiter_backend=limiter_backend,
        )
        async with engine:
            await engine.provider_add(
                "noop", "simulated", options=provider_options or {"latency_ms": "0"}
            )
            yield Bench(engine, store, box)
            await engine.stop()


async def fill(
    engine: Engine, tenant: str, count: int, *, limit: Limit | None = None, chunk: int = 1000
) -> float:
    """Add ``tenant`` (with ``limit``) and enqueue ``count`` notifications for it through the
    public API; returns the enqueue rate per second."""
    if engine.directory.tenant_id(tenant) is None:
        await engine.tenant_add(tenant, limit)
    t0 = time.perf_counter()
    for start in range(0, count, chunk):
        items = [
            EnqueueItem("noop", f"user{i}@example.com", {"i": i}, f"{tenant}-{i}", 0)
            for i in range(start, min(count, start + chunk))
        ]
        await engine.enqueue_many(tenant, items)
    return count / max(time.perf_counter() - t0, 1e-9)


async def wait_delivered(engine: Engine, count: int, *, timeout_s: float) -> bool:
    """Wait until the engine has written ``count`` deliveries (read from its in-memory counters,
    so the wait itself puts no load on the store). False on timeout or failure."""
    deadline = time.perf_counter() + timeout_s
    while engine.telemetry.totals().delivered < count:
        if time.perf_counter() > deadline or engine.failure:
            return False
        await asyncio.sleep(0.005)
    return True


async def drain_rate(engine: Engine, count: int) -> float:
    """Start ``engine``, wait for ``count`` deliveries and stop it; deliveries per second."""
    started = time.perf_counter()
    await engine.start()
    while engine.telemetry.totals().delivered < count:
        if engine.failure:
            raise RuntimeError(engine.failure)
        await asyncio.sleep(0.01)
    rate = count / (time.perf_counter() - started)
    await engine.stop()
    return rate


def log_level_warning() -> None:
    """Keep library loggers (procrastinate logs every job at INFO) quiet and cheap."""
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
