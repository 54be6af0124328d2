"""Drain throughput of N no-op jobs: the OmniPost engine beside Procrastinate and a ceiling.

On Postgres, three sides, each in its own fresh database, with the same N and concurrency:

- ``omnipost``: the engine with a no-op provider (simulated, 0 ms), no rate limits. N are
  enqueued through ``Engine.enqueue_many`` first (not timed); the clock runs from
  ``start()`` until N deliveries are written back.
- ``procrastinate``: a no-op ``async`` task, N jobs from ``batch_defer_async``, its schema
  applied with ``schema_manager.apply_schema_async()``; timed ``run_worker_async(wait=False)``,
  which returns once the queue is empty and the jobs are finished. Its pool gets the same
  connections as OmniPost's (10, up to 20).
- ``ceiling``: OmniPost's own claim and acknowledge statements (``engine.store.pg_hot``'s, the
  ones ``QueueRepo.claim`` and ``QueueRepo.complete`` send) issued with bare asyncpg, with no
  engine: a
  claimer keeps at most ``concurrency`` rows leased, claiming up to ``batch`` at a time and
  decrypting each claimed recipient (work the engine must do for every send); an
  acknowledger writes them back as delivered (one statement per at most 256: the grouped
  UPDATE and the delivery-log rows) as soon as they arrive. The same rows as the engine's,
  enqueued the same.

Then, on Postgres, a batch-size sweep against PgQueuer (the fastest Python queue on Postgres
we know of), each run in its own fresh database, in every commit mode, with a larger N:

- ``pgqueuer``: its schema installed as ``pgq install`` does it (``Queries.install()``), N jobs
  for a no-op entrypoint enqueued through ``Queries.enqueue`` 1,000 at a time (timed: its
  enqueue rate), then one ``QueueManager`` on one asyncpg connection, timed
  ``run(mode=QueueExecutionMode.drain, batch_size=B)`` (no cap on its tasks, its default).
- ``omnipost``: the engine as above with ``DispatcherSettings.batch`` = concurrency = B; its
  enqueue rate is ``Engine.enqueue_many``'s, 1,000 at a time, recipients encrypted.

Both sides run at every B in each repeat, the one that goes first swapping between repeats.
Per side the JSON gives every B's median and spread, the best B, and the ratios OmniPost /
PgQueuer at each side's best B and of the enqueue rates.

On SQLite the engine runs beside the same statements (``engine.store.sqlite_hot``'s) issued
with the stdlib ``sqlite3`` module (claim a batch, decrypt its recipients, acknowledge it,
repeat: SQLite has one writer at a time anyway).

Sides alternate within each repeat; the JSON gives each side's median and spread and the
ratios of the medians. A probe then times one claim of 32 and its acknowledgement alone, back
to back, through the store and as the bare statements, to show where the difference lies.
Usage::

    .venv/bin/python bench/drain_peers.py [--count 2000] [--sqlite-count 10000]
        [--concurrency 32] [--batch 32] [--wide 128] [--pg-modes async-commit,durable]
        [--repeat 3] [--pgqueuer-count 20000] [--pgqueuer-batches 10,32,64,128]
        [--skip-pg] [--skip-sqlite] [--out FILE]

N is small because Procrastinate, at a few hundred jobs a second here, sets the run time; the
PgQueuer sweep has its own N (``--pgqueuer-count``; ``--pgqueuer-batches ''`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg
from _common import (
    asyncpg_dsn,
    emit,
    fill,
    fresh_pg,
    log_level_warning,
    median,
    open_engine,
    parser,
    pg_commit_ms,
    pg_reachable,
    pg_version,
    spread,
    wait_delivered,
)

from engine import NotificationState, Outcome, SecretBox
from engine.store import Completion, Leased, pg_hot, sqlite_hot

OWNER = "bench-ceiling"
PG_SIDES = ("omnipost", "procrastinate", "ceiling")
ACK_CHUNK = 256  # DispatcherSettings.completion_batch
LEASE_S = 30.0
PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000")  # the engine's


def pg_claim(conn: Any, n: int) -> Any:
    """The store's claim on Postgres (``engine.store.pg_hot``), one statement."""
    now = time.time()
    return conn.fetch(pg_hot.CLAIM_SQL, 1, 1, now, n, OWNER, now + LEASE_S, "queued", "leased")


def pg_ack(conn: Any, rows: list[Any]) -> Any:
    """The store's acknowledgement on Postgres: the leases and their delivery-log rows, one
    statement, the per-row values as arrays (as ``pg_hot.deliver`` passes them)."""
    now, k = time.time(), len(rows)
    pairs = sorted((r[0], r[4]) for r in rows)
    ids, attempts = [p[0] for p in pairs], [p[1] for p in pairs]
    zero = [0.0] * k
    return conn.fetch(
        pg_hot.DELIVER_SQL,
        ids,
        attempts,
        now,
        OWNER,
        OWNER,
        ["simulated"] * k,
        [now] * k,
        zero,
        zero,
    )


def sqlite_claim(con: sqlite3.Connection, n: int) -> list[Any]:
    """The store's claim on SQLite (``engine.store.sqlite_hot``), in its own transaction."""
    now = time.time()
    return sqlite_hot.claim(con, 1, 1, n, OWNER, now + LEASE_S, now)


def sqlite_ack(con: sqlite3.Connection, rows: list[Any]) -> int:
    """The store's acknowledgement on SQLite: the grouped update and the delivery-log rows, in
    one transaction; returns how many it applied."""
    now = time.time()
    pairs = sorted((r[0], r[4]) for r in rows)
    params: list[Any] = ["delivered", now, *(p[0] for p in pairs)]
    params += [x for pair in pairs for x in pair] + [OWNER, "leased"]
    con.execute("BEGIN IMMEDIATE")
    done = con.execute(sqlite_hot.deliver_sql(len(pairs)), params).fetchall()
    logs = [(i, 1, 1, a, "delivered", "simulated", OWNER, now, 0.0, 0.0) for i, a in pairs]
    con.executemany(sqlite_hot.LOG_SQL, logs)
    con.execute("COMMIT")
    return len(done)


# -- OmniPost ------------------------------------------------------------------------------


async def run_engine(url: str, count: int, concurrency: int, batch: int) -> dict[str, Any]:
    async with open_engine(url, concurrency=concurrency, batch=batch) as b:
        enqueue_per_s = await fill(b.engine, "bench", count)
        t0 = time.perf_counter()
        await b.engine.start()
        ok = await wait_delivered(b.engine, count, timeout_s=600)
        elapsed = time.perf_counter() - t0
    return {"per_s": count / elapsed, "ok": ok, "enqueue_per_s": enqueue_per_s}


async def prepare_rows(url: str, count: int) -> SecretBox:
    """The ceiling's rows: the same tenant, provider and notifications as the engine's run;
    returns the key they were encrypted with (the ceiling decrypts each recipient it claims,
    as the engine must)."""
    async with open_engine(url) as b:
        await fill(b.engine, "bench", count)
        return b.box


# -- the ceiling on Postgres ---------------------------------------------------------------


class Pipeline:
    """A claimer and an acknowledger sharing leased rows, as the engine's dispatcher and
    completer do, with nothing else: no limiter, no provider, no tasks per row."""

    def __init__(
        self, conn_claim: Any, conn_ack: Any, count: int, concurrency: int, box: SecretBox
    ) -> None:
        self.claim_conn, self.ack_conn = conn_claim, conn_ack
        self.box = box
        self.count, self.concurrency = count, concurrency
        self.inflight = 0
        self.acked = 0
        self.pending: list[Any] = []
        self.ready = asyncio.Event()
        self.room = asyncio.Event()

    async def claimer(self, batch: int) -> None:
        claimed = 0
        while claimed < self.count:
            free = self.concurrency - self.inflight
            if free <= 0:
                self.room.clear()
                await self.room.wait()
                continue
            rows = await pg_claim(self.claim_conn, min(batch, free))
            if not rows:
                raise RuntimeError("the ceiling ran out of rows before it claimed them all")
            for row in rows:
                self.box.decrypt(row[1])  # the recipient, as a send needs it
            claimed += len(rows)
            self.inflight += len(rows)
            self.pending.extend(rows)
            self.ready.set()

    async def acknowledger(self) -> None:
        while self.acked < self.count:
            await self.ready.wait()
            self.ready.clear()
            while self.pending:
                rows, self.pending = self.pending[:ACK_CHUNK], self.pending[ACK_CHUNK:]
                self.acked += len(await pg_ack(self.ack_conn, rows))
                self.inflight -= len(rows)
                self.room.set()


async def run_ceiling_pg(url: str, count: int, concurrency: int, batch: int) -> dict[str, Any]:
    box = await prepare_rows(url, count)
    dsn = asyncpg_dsn(url)
    a, b = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        pipe = Pipeline(a, b, count, concurrency, box)
        t0 = time.perf_counter()
        await asyncio.gather(pipe.claimer(batch), pipe.acknowledger())
        elapsed = time.perf_counter() - t0
    finally:
        await a.close()
        await b.close()
    return {"per_s": count / elapsed, "ok": pipe.acked == count}


# -- Procrastinate -------------------------------------------------------------------------


async def run_procrastinate(url: str, count: int, concurrency: int) -> dict[str, Any]:
    import procrastinate

    dsn = asyncpg_dsn(url)
    connector = procrastinate.PsycopgConnector(conninfo=dsn, min_size=10, max_size=20)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        for start in range(0, count, 1000):
            await noop.batch_defer_async(*({} for _ in range(min(1000, count - start))))
        enqueue_per_s = count / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False
        )
        elapsed = time.perf_counter() - t0
    conn = await asyncpg.connect(dsn)
    try:
        done = await conn.fetchval(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
    finally:
        await conn.close()
    return {"per_s": count / elapsed, "ok": done == count, "enqueue_per_s": enqueue_per_s}


# -- PgQueuer ------------------------------------------------------------------------------

PGQ_CHUNK = 1000  # jobs per enqueue call, as fill() enqueues OmniPost's


async def run_pgqueuer(url: str, count: int, batch: int) -> dict[str, Any]:
    """Install PgQueuer's schema, enqueue ``count`` no-op jobs (timed), then drain them with
    one ``QueueManager`` at ``batch_size=batch`` (timed). Done: every job logged successful
    and none left in its queue table."""
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        t0 = time.perf_counter()
        for start in range(0, count, PGQ_CHUNK):
            ids = range(start, min(count, start + PGQ_CHUNK))
            payloads: list[bytes | None] = [b'{"i": %d}' % i for i in ids]
            await queries.enqueue(["noop"] * len(ids), payloads, [0] * len(ids))
        enqueue_s = time.perf_counter() - t0
        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            return None

        t0 = time.perf_counter()
        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
        elapsed = time.perf_counter() - t0
        done = await conn.fetchval("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await conn.close()
    return {
        "per_s": count / elapsed,
        "ok": done == count and left == 0,
        "enqueue_per_s": count / enqueue_s,
    }


# -- SQLite --------------------------------------------------------------------------------


def ceiling_sqlite(
    path: Path, count: int, concurrency: int, batch: int, box: SecretBox
) -> dict[str, Any]:
    con = sqlite3.connect(path, isolation_level=None)
    for pragma in PRAGMAS:
        con.execute(f"PRAGMA {pragma}")
    acked = 0
    t0 = time.perf_counter()
    while acked < count:
        rows = sqlite_claim(con, min(batch, concurrency))
        if not rows:
            raise RuntimeError("the ceiling ran out of rows before it claimed them all")
        for row in rows:
            box.decrypt(row[1])  # the recipient, as a send needs it
        acked += sqlite_ack(con, rows)
    elapsed = time.perf_counter() - t0
    con.close()
    return {"per_s": count / elapsed, "ok": acked == count}


# -- where the time goes: one claim and one acknowledgement, alone ---------------------------


async def probe(url: str, rounds: int = 30) -> dict[str, float]:
    """Median ms of a claim of 32 and of its acknowledgement, back to back with nothing else
    running: through the store (``QueueRepo.claim`` / ``complete``) and as the bare
    statements (asyncpg or ``sqlite3``), on the same database and rows."""
    store_claim, store_ack, raw_claim, raw_ack = [], [], [], []
    async with open_engine(url) as b:
        await fill(b.engine, "bench", 2 * 32 * rounds)
        queue = b.store.queue
        for _ in range(rounds):
            t0 = time.perf_counter()
            leased = await queue.claim(1, 1, 32, owner=OWNER, lease_s=LEASE_S, now=time.time())
            t1 = time.perf_counter()
            await queue.complete([_done(item) for item in leased], worker=OWNER)
            store_claim.append(t1 - t0)
            store_ack.append(time.perf_counter() - t1)
        raw = RawSqlite(url) if url.startswith("sqlite") else await RawPg.open(url)
        try:
            for _ in range(rounds):
                t0 = time.perf_counter()
                rows = await raw.claim(32)
                t1 = time.perf_counter()
                await raw.ack(rows)
                raw_claim.append(t1 - t0)
                raw_ack.append(time.perf_counter() - t1)
        finally:
            await raw.close()
    ms = {"store_claim_ms": store_claim, "store_ack_ms": store_ack}
    ms |= {"bare_claim_ms": raw_claim, "bare_ack_ms": raw_ack}
    return {k: round(statistics.median(v) * 1000, 2) for k, v in ms.items()}


def _done(item: Leased) -> Completion:
    now = time.time()
    return Completion(
        leased=item,
        outcome=Outcome.DELIVERED,
        state=NotificationState.DELIVERED,
        detail="simulated",
        ts=now,
        latency_s=now - item.enqueued_at,
    )


class RawPg:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, url: str) -> RawPg:
        return cls(await asyncpg.connect(asyncpg_dsn(url)))

    async def claim(self, n: int) -> list[Any]:
        return list(await pg_claim(self.conn, n))

    async def ack(self, rows: list[Any]) -> None:
        await pg_ack(self.conn, rows)

    async def close(self) -> None:
        await self.conn.close()


class RawSqlite:
    def __init__(self, url: str) -> None:
        self.con = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        for pragma in PRAGMAS:
            self.con.execute(f"PRAGMA {pragma}")

    async def claim(self, n: int) -> list[Any]:
        return sqlite_claim(self.con, n)

    async def ack(self, rows: list[Any]) -> None:
        sqlite_ack(self.con, rows)

    async def close(self) -> None:
        self.con.close()


# -- driver --------------------------------------------------------------------------------

Side = Callable[[], Coroutine[Any, Any, dict[str, Any]]]
OURS = ("omnipost", "omnipost_wide")
PEERS = ("procrastinate", "ceiling")


@dataclass(frozen=True)
class Plan:
    count: int
    concurrency: int
    batch: int
    wide: int  # concurrency and batch of the extra "omnipost_wide" run; 0 for none


async def run_ours(side: str, url: str, plan: Plan) -> dict[str, Any]:
    if side == "omnipost_wide":
        return await run_engine(url, plan.count, plan.wide, plan.wide)
    return await run_engine(url, plan.count, plan.concurrency, plan.batch)


async def pg_side(side: str, plan: Plan, *, durable: bool) -> dict[str, Any]:
    async with fresh_pg(side[:6], durable=durable) as url:
        if side in OURS:
            return await run_ours(side, url, plan)
        if side == "procrastinate":
            return await run_procrastinate(url, plan.count, plan.concurrency)
        return await run_ceiling_pg(url, plan.count, plan.concurrency, plan.batch)


async def sqlite_side(side: str, plan: Plan) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        url = f"sqlite:///{path}"
        if side in OURS:
            return await run_ours(side, url, plan)
        box = await prepare_rows(url, plan.count)
        return await asyncio.to_thread(
            ceiling_sqlite, path, plan.count, plan.concurrency, plan.batch, box
        )


async def compare(sides: dict[str, Side], repeat: int) -> dict[str, Any]:
    """Run every side ``repeat`` times, alternating; median per side and ratios of medians."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, side in sides.items():
            runs[name].append(await side())
    result: dict[str, Any] = {}
    for name, samples in runs.items():
        result[name] = {
            "per_s": spread([s["per_s"] for s in samples]),
            "all_ok": all(s["ok"] for s in samples),
        }
        if "enqueue_per_s" in samples[0]:
            result[name]["enqueue_per_s"] = median([s["enqueue_per_s"] for s in samples])
    result["ratios"] = {
        f"{ours}_over_{peer}": round(
            result[ours]["per_s"]["median"] / result[peer]["per_s"]["median"], 3
        )
        for ours in OURS
        if ours in result
        for peer in PEERS
        if peer in result
    }
    return result


def names(wide: int, peers: tuple[str, ...]) -> tuple[str, ...]:
    return ("omnipost", *(("omnipost_wide",) if wide else ()), *peers)


# -- the batch-size sweep against PgQueuer -------------------------------------------------

SWEPT = ("omnipost", "pgqueuer")
Runs = dict[int, list[dict[str, Any]]]  # batch -> one side's runs at it


@dataclass(frozen=True)
class Sweep:
    count: int
    batches: tuple[int, ...]


async def sweep_run(side: str, count: int, batch: int, *, durable: bool) -> dict[str, Any]:
    async with fresh_pg(f"{side[:6]}{batch}", durable=durable) as url:
        if side == "pgqueuer":
            return await run_pgqueuer(url, count, batch)
        return await run_engine(url, count, batch, batch)


async def sweep(plan: Sweep, repeat: int, *, durable: bool) -> dict[str, Any]:
    """Both sides at every batch, ``repeat`` times, the side that goes first swapping each
    repeat; per side its figures (``swept``), then OmniPost / PgQueuer at each side's best
    batch, of the enqueue rates, and at each batch."""
    runs: dict[str, Runs] = {side: {b: [] for b in plan.batches} for side in SWEPT}
    for r in range(repeat):
        for batch in plan.batches:
            for side in SWEPT[::-1] if r % 2 else SWEPT:
                runs[side][batch].append(await sweep_run(side, plan.count, batch, durable=durable))
    result: dict[str, Any] = {side: swept(runs[side]) for side in SWEPT}
    ours, theirs = result["omnipost"], result["pgqueuer"]
    at = {str(b): (ours["by_batch"][str(b)], theirs["by_batch"][str(b)]) for b in plan.batches}
    result["ratios"] = {
        "omnipost_over_pgqueuer_at_best": round(ours["best_per_s"] / theirs["best_per_s"], 3),
        "enqueue_omnipost_over_pgqueuer": round(
            ours["enqueue_per_s"]["median"] / theirs["enqueue_per_s"]["median"], 3
        ),
        "by_batch": {
            b: round(o["per_s"]["median"] / t["per_s"]["median"], 3) for b, (o, t) in at.items()
        },
    }
    return result


def swept(runs: Runs) -> dict[str, Any]:
    """One side of the sweep: each batch's drain rate, the batch with the highest median, and
    the enqueue rate over all the side's runs (the enqueue does not depend on the batch)."""
    rates = {b: spread([s["per_s"] for s in samples]) for b, samples in runs.items()}
    best = max(rates, key=lambda b: rates[b]["median"])
    return {
        "by_batch": {
            str(b): {"per_s": rates[b], "all_ok": all(s["ok"] for s in runs[b])} for b in runs
        },
        "best_batch": best,
        "best_per_s": rates[best]["median"],
        "enqueue_per_s": spread([s["enqueue_per_s"] for b in runs for s in runs[b]]),
        "all_ok": all(s["ok"] for b in runs for s in runs[b]),
    }


async def run_postgres(plan: Plan, pgq: Sweep, modes: list[str], repeat: int) -> dict[str, Any]:
    report: dict[str, Any] = {
        "postgres_version": await pg_version(),
        "postgres_commit_ms": await pg_commit_ms(),
    }
    if pgq.batches:
        report["pgqueuer"] = {
            "version": metadata.version("pgqueuer"),
            "count": pgq.count,
            "batches": list(pgq.batches),
        }
    for mode in modes:
        durable = mode == "durable"
        sides: dict[str, Side] = {
            name: functools.partial(pg_side, name, plan, durable=durable)
            for name in names(plan.wide, PEERS)
        }
        report[f"postgres_{mode}"] = await compare(sides, repeat)
        if pgq.batches:
            report["pgqueuer"][mode] = await sweep(pgq, repeat, durable=durable)
    async with fresh_pg("probe", durable=False) as url:
        report["postgres_probe"] = await probe(url)
    return report


def batches(p: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    """``--pgqueuer-batches``: positive whole numbers, comma separated; empty for none."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        p.error(f"--pgqueuer-batches takes whole numbers separated by commas, not {text!r}.")
    if any(size < 1 for size in sizes):
        p.error(f"--pgqueuer-batches takes batch sizes of at least 1, not {text!r}.")
    return sizes


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--count", type=int, default=2_000, help="jobs per Postgres run")
    p.add_argument("--sqlite-count", type=int, default=10_000, help="jobs per SQLite run")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch", type=int, default=32, help="OmniPost's leases per claim")
    p.add_argument(
        "--wide",
        type=int,
        default=128,
        help="also run OmniPost alone with this concurrency "
        "and batch, to show what the batch size buys (0: skip)",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--pgqueuer-count", type=int, default=20_000, help="jobs per PgQueuer sweep run")
    p.add_argument(
        "--pgqueuer-batches",
        default="10,32,64,128",
        help="comma list of batch sizes to sweep both OmniPost and PgQueuer over ('': skip)",
    )
    p.add_argument(
        "--pg-modes",
        default="async-commit,durable",
        help="comma list: async-commit (synchronous_commit off on the bench database: the "
        "engines' own cost) and/or durable (the server's default: every commit waits for fsync)",
    )
    p.add_argument("--skip-pg", action="store_true")
    p.add_argument("--skip-sqlite", action="store_true")
    args = p.parse_args()
    log_level_warning()
    pg_plan = Plan(args.count, args.concurrency, args.batch, args.wide)
    lite_plan = Plan(args.sqlite_count, args.concurrency, args.batch, args.wide)
    pgq = Sweep(args.pgqueuer_count, batches(p, args.pgqueuer_batches))
    report: dict[str, Any] = {
        "bench": "drain_peers",
        "count": {"postgres": pg_plan.count, "sqlite": lite_plan.count},
        "concurrency": args.concurrency,
        "batch": args.batch,
        "wide": args.wide,
        "repeat": args.repeat,
    }
    if not args.skip_pg and await pg_reachable():
        report.update(await run_postgres(pg_plan, pgq, args.pg_modes.split(","), args.repeat))
    if not args.skip_sqlite:
        report["sqlite_version"] = sqlite3.sqlite_version
        sides: dict[str, Side] = {
            name: functools.partial(sqlite_side, name, lite_plan)
            for name in names(lite_plan.wide, ("ceiling",))
        }
        report["sqlite"] = await compare(sides, args.repeat)
        with tempfile.TemporaryDirectory() as tmp:
            report["sqlite_probe"] = await probe(f"sqlite:///{Path(tmp) / 'probe.db'}")
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
