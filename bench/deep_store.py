"""Months of operation: what a deep store costs today's work (issue 10).

A store that has run for months keeps what it did: ``--history`` finished notifications of a
tenant ``history`` (delivered, spread over the past 30 days, each with its delivery-log row),
and a tenant ``backlog``, limited to 1/s with burst 1 and enabled, with ``--backlog``
notifications queued and due. The cost of today's work must not grow with either.

For each database (a SQLite file; Postgres, a fresh database with ``synchronous_commit =
off``), stores are set up the same way, ``omnipost migrate``, then tenants ``history``,
``backlog`` (1/s, burst 1) and ``fresh`` and a ``file`` provider, and differ only in the rows
bulk-inserted in SQL after the migration (one ``INSERT ... SELECT`` each; every recipient is
the same real encrypted token): ``empty`` gets none, ``deep`` the history and backlog above, and
``shallow`` ``--shallow`` rows queued for ``backlog`` (more than the dispatcher counts per
key) and no history. Deep over shallow is the cost of depth; shallow over empty that of a
throttled tenant with work (``--shallow 0`` leaves it out). Then ``VACUUM ANALYZE`` on
Postgres, as autovacuum does after that many inserts, and ``ANALYZE`` plus ``PRAGMA
optimize`` on SQLite. Retention (when the engine has it) is set to keep everything, so that
the store stays as deep as it was made and no worker starts pruning during a measurement.
Then, side by side:

- drain: ``--count`` notifications of ``fresh`` for the file provider, queued with ``omnipost
  enqueue --file``, then a real ``omnipost worker --concurrency 32`` process, timed from its
  spawn until the last of them is a line in the provider's file (polled every few ms, so the
  wait puts no load on the store), then stopped with SIGTERM. ``--until-empty`` cannot be used:
  the backlog keeps the deep store from ever being empty, so every side runs with
  ``--duration`` and is stopped the same way. ``--runs`` repeats, alternating the order of the
  sides. ``per_s`` counts from the spawn (the process's start-up included), ``steady_per_s``
  from the first line to the last.
- ``omnipost stats --json``: the wall time of a whole call (a process each, median of
  ``--stats-calls`` after one unmeasured, the sides alternating), and ``Engine.snapshot()``
  in process (median of ``--snapshot-calls``), with the store statements behind them, the
  dispatcher's refresh, the console's queue view and ``dead list`` timed alone.
- the store's size after setup and, after the runs, whether the counts the engine reports
  (``snapshot``) match a ``GROUP BY`` over the table.

Usage::

    .venv/bin/python bench/deep_store.py [--stores sqlite,postgres] [--history 1000000]
        [--backlog 1000000] [--shallow 2000] [--count 5000] [--runs 2] [--stats-calls 5]
        [--snapshot-calls 20] [--max-drain-s 300] [--out FILE]

A quick check of the script: ``--history 20000 --backlog 20000 --count 1000 --runs 1``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from _common import (
    PG_ADMIN,
    asyncpg_dsn,
    emit,
    fresh_pg,
    new_engine,
    open_store,
    parser,
    pg_reachable,
    pg_version,
    spread,
)
from scale_queue import COLUMNS, bulk_insert, median_ms

from engine import Limit, SecretBox

ROOT = Path(__file__).resolve().parent.parent
HISTORY_SPAN_S = 30 * 86400.0
CONCURRENCY = 32
PROVIDER = "out"
RECIPIENT = "customer@example.com"
FRESH_LINE = b'"tenant":"fresh"'  # the file provider writes compact JSON
POLL_S = 0.005

# History: delivered rows whose enqueue (and delivery, 50 to 540 ms later) times spread evenly
# over the past 30 days, then one delivery-log row each, copied from them.
PG_HISTORY = (
    f"INSERT INTO notifications ({COLUMNS}, finished_at) SELECT $1, $2, $3, "
    "'{\"order\":' || g || ',\"template\":\"shipped\"}', 'h' || lpad(g::text, 9, '0'), 0, "
    "'delivered', 1, 0, 5, t, t, t + 0.05 + (g % 50) / 100.0 FROM generate_series(1, $4) g, "
    "LATERAL (SELECT $5::float8 - $6::float8 * ($4 - g) / $4 AS t) s"
)
SQLITE_HISTORY = (
    "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n) "
    f"INSERT INTO notifications ({COLUMNS}, finished_at) SELECT :tenant, :provider, :token, "
    "'{\"order\":' || x || ',\"template\":\"shipped\"}', 'h' || printf('%09d', x), 0, "
    "'delivered', 1, 0, 5, t, t, t + 0.05 + (x % 50) / 100.0 "
    "FROM (SELECT x, :now - :span * (:n - x) / :n AS t FROM g)"
)
LOG = (
    "INSERT INTO delivery_log (notification_id, tenant_id, provider_id, attempt, outcome,"
    " detail, worker, ts, latency_s) SELECT id, tenant_id, provider_id, 1, 'delivered', '',"
    " 'bench-history', finished_at, finished_at - enqueued_at FROM notifications"
    " WHERE tenant_id = {tenant}"
)
TRUE_COUNTS = (
    "SELECT t.name, n.state, count(*) FROM notifications n JOIN tenants t ON t.id = n.tenant_id"
    " GROUP BY t.name, n.state"
)


def omnipost() -> list[str]:
    """The ``omnipost`` command of this environment (``python -m app`` when not installed)."""
    script = Path(sys.executable).with_name("omnipost")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app"]


@dataclass
class Side:
    """One store of a comparison: ``empty``, ``shallow`` or ``deep``, with the rows it gets."""

    name: str
    url: str
    folder: Path
    key: str
    history: int = 0
    backlog: int = 0

    @property
    def box(self) -> SecretBox:
        return SecretBox([self.key])

    @property
    def out(self) -> Path:
        """The file provider's file."""
        return self.folder / "out.jsonl"

    @property
    def sqlite_path(self) -> str | None:
        return self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite") else None

    def env(self) -> dict[str, str]:
        """No OMNIPOST_* from outside (OMNIPOST_REDIS would move the buckets to Redis); a data
        folder of its own and the key the in-process store uses."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIPOST_")}
        return env | {"OMNIPOST_HOME": str(self.folder / "home"), "OMNIPOST_KEYS": self.key}

    def command(self, *args: str) -> list[str]:
        return [*omnipost(), *args, "--db", self.url]

    def cli(self, *args: str) -> str:
        """Run ``omnipost ARGS --db URL``; its stdout, or RuntimeError with its stderr."""
        done = subprocess.run(
            self.command(*args),
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"omnipost {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout


# -- setup ---------------------------------------------------------------------------------


async def sql(url: str, statements: list[tuple[str, Any]], *, fetch: bool = False) -> list[Any]:
    """Run ``statements`` (text and parameters) on ``url`` outside the store, one connection,
    autocommit (a ``BEGIN`` among them opens a transaction); with ``fetch``, the rows of the
    last one."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")

        def run() -> list[Any]:
            con = sqlite3.connect(path, isolation_level=None)
            try:
                rows: list[Any] = []
                for text, params in statements:
                    rows = con.execute(text, params).fetchall()
                return rows
            finally:
                con.close()

        return await asyncio.to_thread(run)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = []
        for text, params in statements:
            if fetch:
                rows = [tuple(r) for r in await conn.fetch(text, *params)]
            else:
                await conn.execute(text, *params)
        return rows
    finally:
        await conn.close()


async def insert_history(
    url: str, tenant_id: int, provider_id: int, token: str, size: int
) -> float:
    """``size`` delivered rows of ``tenant_id`` and their delivery-log rows, in one
    transaction; returns the seconds it took."""
    if size <= 0:  # the recursive CTE below would still make its first row
        return 0.0
    now = time.time() - 60
    t0 = time.perf_counter()
    if url.startswith("sqlite"):
        params = {
            "n": size,
            "tenant": tenant_id,
            "provider": provider_id,
            "token": token,
            "now": now,
            "span": HISTORY_SPAN_S,
        }
        statements = [
            ("BEGIN IMMEDIATE", ()),
            (SQLITE_HISTORY, params),
            (LOG.format(tenant="?"), (tenant_id,)),
            ("COMMIT", ()),
        ]
        await sql(url, statements)
    else:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            async with conn.transaction():
                await conn.execute(
                    PG_HISTORY, tenant_id, provider_id, token, size, now, HISTORY_SPAN_S
                )
                await conn.execute(LOG.format(tenant="$1"), tenant_id)
        finally:
            await conn.close()
    return time.perf_counter() - t0


async def analyze(side: Side) -> float:
    """Planner statistics, as a store that has run a while has them: ``VACUUM ANALYZE`` on
    Postgres (what autovacuum runs after many inserts; done here so that it does not start in
    the middle of a measurement), ``ANALYZE`` and ``PRAGMA optimize`` on SQLite (which never
    analyses by itself). Then a checkpoint and a sync, so that the writes of the bulk insert
    are on disk before anything is measured, not flushed during it."""
    t0 = time.perf_counter()
    if side.sqlite_path:
        await sql(
            side.url,
            [("ANALYZE", ()), ("PRAGMA optimize", ()), ("PRAGMA wal_checkpoint(TRUNCATE)", ())],
        )
    else:
        await sql(side.url, [("VACUUM ANALYZE", ()), ("CHECKPOINT", ())])
    await asyncio.to_thread(os.sync)
    return time.perf_counter() - t0


def file_bytes(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def store_bytes(side: Side) -> dict[str, int]:
    if side.sqlite_path:
        return {
            "db_bytes": file_bytes(Path(side.sqlite_path)),
            "wal_bytes": file_bytes(Path(side.sqlite_path + "-wal")),
        }
    rows = await sql(side.url, [("SELECT pg_database_size(current_database())", ())], fetch=True)
    return {"db_bytes": int(rows[0][0])}


async def setup(side: Side) -> dict[str, Any]:
    """``omnipost migrate``, the tenants and the provider, then the side's rows."""
    (side.folder / "home").mkdir(parents=True)
    t0 = time.perf_counter()
    migrated = side.cli("migrate").split()  # "store URL is at revision N"
    info: dict[str, Any] = {
        "history": side.history,
        "backlog": side.backlog,
        "migrate_s": round(time.perf_counter() - t0, 2),
        "revision": migrated[-1] if migrated else None,
    }
    async with open_store(side.url, side.box) as (store, _), new_engine(store) as engine:
        await engine.provider_add(PROVIDER, "file", options={"path": str(side.out)})
        history = await engine.tenant_add("history")
        backlog = await engine.tenant_add("backlog", Limit(1.0, 1.0))
        await engine.tenant_add("fresh")
        provider_id = engine.directory.provider_id(PROVIDER) or 0
        # Keep everything (migration 0003's retention, when the engine has it): the store must
        # stay as deep as it was made, and no worker may start pruning during a measurement.
        set_retention = getattr(engine, "retention_set", None)
        if set_retention is not None:
            await set_retention(delivered_s=None, dead_s=None, log_s=None, audit_s=None)
            info["retention"] = "forever"
    if side.history or side.backlog:
        token = side.box.encrypt(RECIPIENT)
        history_s = await insert_history(side.url, history.id, provider_id, token, side.history)
        # scale_queue's bulk insert: due rows, enqueued a minute ago (ANALYZE on Postgres).
        backlog_s = (
            await bulk_insert(
                side.url, backlog.id, provider_id, token, side.backlog, analyze_sqlite=False
            )
            if side.backlog > 0
            else 0.0
        )
        info |= {"history_insert_s": round(history_s, 1), "backlog_insert_s": round(backlog_s, 1)}
    info["analyze_s"] = round(await analyze(side), 1)
    return info | await store_bytes(side)


# -- measurements --------------------------------------------------------------------------


def stats_cli(pair: list[Side], calls: int) -> dict[str, list[float]]:
    """Milliseconds per whole ``omnipost stats --json`` (a process each) on each side, after
    one unmeasured; the sides alternate, so that a change in the machine's load hits both."""
    for side in pair:
        json.loads(side.cli("stats", "--json"))
    samples: dict[str, list[float]] = {side.name: [] for side in pair}
    for i in range(calls):
        for side in pair if i % 2 == 0 else pair[::-1]:
            t0 = time.perf_counter()
            json.loads(side.cli("stats", "--json"))
            samples[side.name].append((time.perf_counter() - t0) * 1000)
    return samples


async def in_process(side: Side, calls: int) -> dict[str, Any]:
    """``Engine.snapshot()`` on an opened, not started engine, and alone: the statements
    behind it, the dispatcher's refresh and ``stats``, and the reads behind the console's
    queue view (a tenant's notifications) and ``omnipost dead list``."""
    async with open_store(side.url, side.box) as (store, _), new_engine(store) as engine:
        await engine.snapshot()
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await engine.snapshot()
            samples.append((time.perf_counter() - t0) * 1000)
        enabled = [t.id for t in engine.directory.tenants.values() if t.enabled]
        queue = store.queue
        statements = {
            "depth_ms": await median_ms(store.notifications.depth, 5),
            "due_keys_ms": await median_ms(lambda: queue.due_pairs(time.time(), enabled), 5),
            "outcomes_60s_ms": await median_ms(
                lambda: store.stats.outcomes_since(time.time() - 60), 5
            ),
            "dead_ms": await median_ms(engine.dead, 3),
        }
        # Each tenant's first 100: which one is slow depends on where its rows sit in the
        # table and on the plan the database picks.
        for tenant in ("history", "backlog", "fresh"):
            statements[f"notifications_{tenant}_ms"] = await median_ms(
                functools.partial(engine.notifications, tenant, limit=100), 3
            )
    return {"snapshot_ms": spread(samples, 2), "statements": statements}


def watch(
    path: Path, count: int, proc: subprocess.Popen[bytes], deadline: float
) -> tuple[int, float | None, float | None]:
    """Follow the provider's file until ``count`` lines of ``fresh`` are in it, the worker
    exits, or ``deadline``: (lines seen, perf_counter of the first, of the count-th)."""
    seen, offset, rest = 0, 0, b""
    first = last = None
    while seen < count and time.perf_counter() < deadline and proc.poll() is None:
        try:
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        now = time.perf_counter()
        if chunk:
            offset += len(chunk)
            complete, _, rest = (rest + chunk).rpartition(b"\n")
            found = complete.count(FRESH_LINE)
            if found and first is None:
                first = now
            seen += found
            if seen >= count:
                last = now
                break
        time.sleep(POLL_S)
    return seen, first, last


def fresh_ids(path: Path) -> list[int]:
    if not path.exists():
        return []
    lines = path.read_bytes().splitlines()
    return [json.loads(line)["notification_id"] for line in lines if FRESH_LINE in line]


def drain(side: Side, run: int, args: Any) -> dict[str, Any]:
    """Enqueue ``--count`` for ``fresh`` with the CLI, then time a worker process until the
    last of them is written, and stop it with SIGTERM."""
    lines = side.folder / f"fresh-{run}.jsonl"
    with lines.open("w") as f:
        for i in range(args.count):
            item = {
                "tenant": "fresh",
                "provider": PROVIDER,
                "recipient": f"user{i}@example.com",
                "payload": {"i": i, "run": run},
                "key": f"run{run}-{i}",
            }
            f.write(json.dumps(item) + "\n")
    t0 = time.perf_counter()
    side.cli("enqueue", "--file", str(lines))
    enqueue_s = time.perf_counter() - t0
    side.out.unlink(missing_ok=True)  # each worker opens it anew
    load = os.getloadavg()[0]
    worker = side.command(
        "worker", "--concurrency", str(CONCURRENCY), "--duration", "86400", "--quiet"
    )
    stdout, stderr = side.folder / f"worker-{run}.out", side.folder / f"worker-{run}.err"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(worker, env=side.env(), cwd=ROOT, stdout=out, stderr=err)
        try:
            seen, first, last = watch(side.out, args.count, proc, t0 + args.max_drain_s)
            ended = time.perf_counter()
        finally:
            t_term = time.perf_counter()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            stop_s = time.perf_counter() - t_term
    elapsed = (last or ended) - t0
    ids = fresh_ids(side.out)
    result: dict[str, Any] = {
        "run": run,
        "load_avg_1m": round(load, 2),
        "enqueue_s": round(enqueue_s, 2),
        "delivered": seen,
        "finished": last is not None,
        "duplicates": len(ids) - len(set(ids)),
        "first_delivery_s": None if first is None else round(first - t0, 3),
        "seconds": round(elapsed, 3),
        "per_s": round(seen / elapsed, 1),
        "steady_per_s": (
            round((seen - 1) / (last - first), 1) if first and last and last > first else None
        ),
        "stop_s": round(stop_s, 2),
        "exit_code": code,
        "worker_summary": stdout.read_text().strip()[-300:],
    }
    if code != 0 or last is None:
        result["worker_stderr"] = stderr.read_text()[-2000:]
    return result


async def counts(side: Side) -> dict[str, Any]:
    """The counts the engine reports beside a ``GROUP BY`` over the table."""
    async with open_store(side.url, side.box) as (store, _), new_engine(store) as engine:
        snap = await engine.snapshot()
    reported = {
        d.tenant: {
            s: n
            for s, n in (
                ("queued", d.queued),
                ("leased", d.leased),
                ("delivered", d.delivered),
                ("dead", d.dead),
            )
            if n
        }
        for d in snap.depth
    }
    true: dict[str, dict[str, int]] = {}
    for tenant, state, n in await sql(side.url, [(TRUE_COUNTS, ())], fetch=True):
        true.setdefault(tenant, {})[state] = int(n)
    reported = {t: c for t, c in reported.items() if c}
    return {"match": reported == true, "reported": reported, "table": true}


async def pg_settings() -> dict[str, str]:
    """The server settings that move these figures (autovacuum off leaves the planner without
    statistics; JIT compiles any statement the planner thinks expensive)."""
    names = ("shared_buffers", "autovacuum", "jit", "jit_above_cost", "plan_cache_mode")
    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    try:
        rows = await conn.fetch("SELECT name, setting FROM pg_settings WHERE name = ANY($1)", names)
    finally:
        await conn.close()
    return {r["name"]: r["setting"] for r in rows}


# -- one store -----------------------------------------------------------------------------


@asynccontextmanager
async def sides(kind: str, folder: Path, args: Any) -> AsyncIterator[list[Side]]:
    """The stores of one comparison, each with the rows (history, backlog) it gets."""
    rows = {"empty": (0, 0), "shallow": (0, args.shallow), "deep": (args.history, args.backlog)}
    if not args.shallow:
        del rows["shallow"]
    key = SecretBox.generate_key()
    async with AsyncExitStack() as stack:
        pair = []
        for name, (history, backlog) in rows.items():
            if kind == "sqlite":
                url = f"sqlite:///{folder / name / 'store.db'}"
            else:
                url = await stack.enter_async_context(fresh_pg(f"ds{name}", durable=False))
            pair.append(Side(name, url, folder / name, key, history, backlog))
        yield pair


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    return round(a / b, digits) if a is not None and b else None


def compare(result: dict[str, Any]) -> None:
    """Each side's medians, and the deep side's over (or beyond) the empty side's: what depth
    and a throttled tenant with work cost together. Beside the shallow side, when there is
    one, the cost of depth alone; the shallow side over the empty one, that of the throttled
    tenant."""
    sides = [name for name in ("empty", "shallow", "deep") if name in result]
    for name in sides:
        drains = result[name]["drains"]
        result[name]["drain_per_s"] = spread([d["per_s"] for d in drains])
        steady = [d["steady_per_s"] for d in drains if d["steady_per_s"]]
        result[name]["steady_per_s"] = spread(steady) if steady else None
        result[name]["enqueue_s"] = spread([d["enqueue_s"] for d in drains], 2)

    def med(side: str, key: str) -> float | None:
        return result[side][key]["median"] if result[side].get(key) else None

    pairs = [("deep", "empty"), ("deep", "shallow"), ("shallow", "empty")]
    for a, b in pairs if "shallow" in sides else pairs[:1]:
        result[f"{a}_over_{b}"] = {
            key: ratio(med(a, key), med(b, key))
            for key in ("drain_per_s", "steady_per_s", "enqueue_s")
        }
    for label, other in (("extra_ms", "empty"), ("extra_ms_vs_shallow", "shallow")):
        if other in sides:
            result[label] = {
                name: round(result["deep"][key]["median"] - result[other][key]["median"], 2)
                for name, key in (("stats_cli", "stats_cli_ms"), ("snapshot", "snapshot_ms"))
            }


async def run_store(kind: str, args: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"omnipost-deep-{kind}-") as tmp:
        async with sides(kind, Path(tmp), args) as pair:
            result: dict[str, Any] = {}
            for side in pair:
                result[side.name] = {"setup": await setup(side)}
            for name, samples in stats_cli(pair, args.stats_calls).items():
                result[name]["stats_cli_ms"] = spread(samples)
            for side in pair:
                result[side.name] |= await in_process(side, args.snapshot_calls)
                result[side.name]["drains"] = []
            for run in range(args.runs):
                for side in pair if run % 2 == 0 else pair[::-1]:
                    result[side.name]["drains"].append(drain(side, run, args))
            for side in pair:
                result[side.name]["counts"] = await counts(side)
    compare(result)
    return result


async def main() -> None:
    p = parser(__doc__)
    p.add_argument("--stores", default="sqlite,postgres", help="comma list: sqlite, postgres")
    p.add_argument("--history", type=int, default=1_000_000, help="delivered rows kept")
    p.add_argument("--backlog", type=int, default=1_000_000, help="rows queued for 'backlog'")
    p.add_argument(
        "--shallow",
        type=int,
        default=2000,
        help="a third store whose 'backlog' holds this many rows and no history (0: none)",
    )
    p.add_argument("--count", type=int, default=5000, help="notifications drained per run")
    p.add_argument("--runs", type=int, default=2, help="drains per side, alternating")
    p.add_argument("--stats-calls", type=int, default=5)
    p.add_argument("--snapshot-calls", type=int, default=20)
    p.add_argument("--max-drain-s", type=float, default=300.0)
    args = p.parse_args()
    report: dict[str, Any] = {
        "bench": "deep_store",
        "history": args.history,
        "backlog": args.backlog,
        "shallow": args.shallow,
        "count": args.count,
        "runs": args.runs,
        "concurrency": CONCURRENCY,
        "cpu_count": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "sqlite_version": sqlite3.sqlite_version,
    }
    stores = [s for s in args.stores.split(",") if s]
    if "sqlite" in stores:
        report["sqlite"] = await run_store("sqlite", args)
    if "postgres" in stores and await pg_reachable():
        report["postgres_version"] = await pg_version()
        report["postgres_settings"] = await pg_settings()
        report["postgres_note"] = "synchronous_commit off on the bench databases"
        report["postgres"] = await run_store("postgres", args)
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    emit(report, args.out)


if __name__ == "__main__":
    asyncio.run(main())
