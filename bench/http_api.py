"""The HTTP API under load: ``omnipost serve`` driven by a real load generator (``hey``), side
by side in one run with what bounds it. Prints JSON.

    .venv/bin/python bench/http_api.py [--stores sqlite,postgres] [--seconds 10] [--concurrency 32]
        [--workers 1,2] [--batch-only]

For each store, a fresh one holding a tenant (request limit and queue cap out of the way) and a
simulated provider, with no worker running (only the taking-in is measured):

- ``single``: POSTs of one notification a request, per second, at ``--concurrency``;
- ``batch``: POSTs of 100 notifications a request, as rows per second;
- ``latency``: p50 and p99 of single POSTs at half the ``single`` rate (``hey -q``);
- ``bare``: the same single POSTs against a bare endpoint on the same framework and server
  (FastAPI on uvicorn, the same request model validated, answered 202 without a store or a
  key): the ceiling of the framework (target: ``single`` at least 0.5x of it);
- ``direct``: ``Engine.enqueue_many`` called in process with 100 rows a call from
  ``--concurrency`` tasks, recipients encrypted: the ceiling of the store (target: ``batch`` at
  least 0.8x of it);
- ``pgqueuer`` (Postgres): PgQueuer's ``Queries.enqueue`` of 100 jobs a call from
  ``--concurrency`` connections on the same server (target: ``batch`` at least 1.0x of it).

``--workers 1,2`` measures ``batch`` again with ``omnipost serve --workers 2`` (``api_workers_2``,
its ratios suffixed ``_workers_2``); the first count is the headline. ``--batch-only`` measures
the batched rows alone (``batch``, ``direct``, ``pgqueuer``): no single POSTs, no bare endpoint.

The load generator runs on the same two cores as the server it loads, as the peers run beside
nothing: read the ratios as the claim. ``hey`` comes from the system's packages (``apt-get
install hey``); the script says so when it is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import PG_ADMIN, asyncpg_dsn, emit, fresh_pg, parser, pg_reachable

from engine import BUILTIN_KINDS, Engine, EnqueueItem, LocalLimiter, SecretBox, Store, SystemClock

ROOT = Path(__file__).resolve().parents[1]
BATCH = 100
# The targets: single POSTs against the bare endpoint, batched rows against
# Engine.enqueue_many in process and against PgQueuer's enqueue.
TARGETS = {"single_vs_bare": 0.5, "batch_vs_direct": 0.8, "batch_vs_pgqueuer": 1.0}
PAYLOAD: dict[str, Any] = {"subject": "hi", "n": 1}
ITEM: dict[str, Any] = {"provider": "sim", "recipient": "ada@example.com", "payload": PAYLOAD}


def _hey() -> str:
    found = shutil.which("hey")
    if found is None:
        raise SystemExit("bench/http_api.py needs the load generator hey: apt-get install hey")
    return found


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hey(url: str, body: bytes, *, key: str | None, seconds: float, concurrency: int,
        rate: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Run hey against ``url`` with ``body``; its requests per second, latency percentiles
    and status counts."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        f.write(body)
    cmd = [_hey(), "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST"]
    cmd += ["-T", "application/json", "-D", f.name]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    if rate is not None:
        cmd += ["-q", f"{max(1.0, rate / concurrency):.1f}"]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    per_s = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    pct = {int(p): float(s) for p, s in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    statuses = {int(c): int(n) for c, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out)}
    return {"per_s": per_s, "p50_ms": pct.get(50, 0) * 1000, "p99_ms": pct.get(99, 0) * 1000,
            "statuses": statuses}  # fmt: skip


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"no answer from {url}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _omnipost(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "app", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout


def measure_api(
    url: str,
    home: Path,
    seconds: float,
    concurrency: int,
    workers: int = 1,
    *,
    batch_only: bool = False,
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIPOST_")}
    env |= {"OMNIPOST_HOME": str(home), "OMNIPOST_DB": url}
    _omnipost(env, "migrate")
    _omnipost(env, "tenant", "add", "bench")
    _omnipost(
        env, "tenant", "set", "bench", "--api-rate", "1000000/s", "--max-queued", "1000000000"
    )
    _omnipost(env, "provider", "add", "sim", "--kind", "simulated")
    key = json.loads(_omnipost(env, "apikey", "create", "bench", "--json"))["key"]
    port = _free_port()
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(f"{base}/readyz", proc)
        post = f"{base}/v1/notifications"
        single_body = json.dumps(ITEM).encode()
        batch_body = json.dumps({"notifications": [ITEM] * BATCH}).encode()
        hey(post, single_body, key=key, seconds=2, concurrency=concurrency)  # warm up
        if batch_only:
            batch = hey(post, batch_body, key=key, seconds=seconds, concurrency=concurrency)
            return {"batch_rows_per_s": batch["per_s"] * BATCH, "batch_statuses": batch["statuses"]}
        single = hey(post, single_body, key=key, seconds=seconds, concurrency=concurrency)
        batch = hey(post, batch_body, key=key, seconds=seconds, concurrency=concurrency)
        half = hey(post, single_body, key=key, seconds=seconds, concurrency=concurrency,
                   rate=single["per_s"] / 2)  # fmt: skip
    finally:
        _stop(proc)
    return {
        "single_per_s": single["per_s"],
        "single_statuses": single["statuses"],
        "batch_rows_per_s": batch["per_s"] * BATCH,
        "batch_statuses": batch["statuses"],
        "half_rate_per_s": half["per_s"],
        "half_rate_p50_ms": half["p50_ms"],
        "half_rate_p99_ms": half["p99_ms"],
        "half_rate_statuses": half["statuses"],
    }


def measure_bare(seconds: float, concurrency: int) -> dict[str, Any]:
    port = _free_port()
    cmd = [sys.executable, "-m", "uvicorn", "_api_bare:app", "--app-dir", str(ROOT / "bench")]
    cmd += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    cmd += ["--no-server-header"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/healthz", proc)
        url = f"http://127.0.0.1:{port}/v1/notifications"
        body = json.dumps(ITEM).encode()
        hey(url, body, key="op_x", seconds=2, concurrency=concurrency)
        done = hey(url, body, key="op_x", seconds=seconds, concurrency=concurrency)
    finally:
        _stop(proc)
    return {"single_per_s": done["per_s"], "statuses": done["statuses"]}


async def measure_direct(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    """``Engine.enqueue_many`` of 100 rows a call from ``concurrency`` tasks, in process."""
    box = SecretBox([SecretBox.generate_key()])
    async with Store(url, box) as store:
        await store.migrate()
        engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS)
        async with engine:
            await engine.tenant_add("bench")
            await engine.provider_add("sim", "simulated")
            row = EnqueueItem("sim", "ada@example.com", PAYLOAD)
            rows = [row] * BATCH
            done = 0
            deadline = time.perf_counter() + seconds

            async def one() -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    await engine.enqueue_many("bench", rows)
                    done += BATCH

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(concurrency)))
            elapsed = time.perf_counter() - t0
    return {"rows_per_s": done / elapsed}


async def measure_pgqueuer(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    """PgQueuer's enqueue of 100 jobs a call from ``concurrency`` connections."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conns = [await asyncpg.connect(asyncpg_dsn(url)) for _ in range(concurrency)]
    try:
        await Queries(AsyncpgDriver(conns[0])).install()
        payload = json.dumps(ITEM).encode()
        done = 0
        deadline = time.perf_counter() + seconds

        async def one(conn: Any) -> None:
            nonlocal done
            queries = Queries(AsyncpgDriver(conn))
            while time.perf_counter() < deadline:
                await queries.enqueue(["send"] * BATCH, [payload] * BATCH, [0] * BATCH)
                done += BATCH

        t0 = time.perf_counter()
        await asyncio.gather(*(one(c) for c in conns))
        elapsed = time.perf_counter() - t0
    finally:
        for conn in conns:
            await conn.close()
    return {"rows_per_s": done / elapsed}


def _ratios(result: dict[str, Any]) -> dict[str, Any]:
    found = {}
    if "bare" in result:
        found["single_vs_bare"] = result["api"]["single_per_s"] / result["bare"]["single_per_s"]
    for side in [s for s in result if s.startswith("api")]:
        suffix = side.removeprefix("api")  # "" or "_workers_N"
        rows_per_s = result[side]["batch_rows_per_s"]
        found[f"batch_vs_direct{suffix}"] = rows_per_s / result["direct"]["rows_per_s"]
        if "pgqueuer" in result:
            found[f"batch_vs_pgqueuer{suffix}"] = rows_per_s / result["pgqueuer"]["rows_per_s"]
    return {k: round(v, 3) for k, v in found.items()}


async def _pg_run(tag: str, fn: Any) -> Any:
    async with fresh_pg(tag) as url:
        return await fn(url)


def run_store(
    store: str,
    home: Path,
    bare: dict[str, Any] | None,
    seconds: float,
    n: int,
    workers: list[int],
) -> Any:
    """Every measure of one store, each on a fresh database (and a fresh home per server);
    without ``bare``, the batched rows alone."""
    only = bare is None
    found: dict[str, Any] = {} if only else {"bare": bare}
    for count in workers:
        side = "api" if count == workers[0] else f"api_workers_{count}"
        folder = home / side
        folder.mkdir()
        if store == "sqlite":
            url = f"sqlite:///{folder / 'api.db'}"
            found[side] = measure_api(url, folder, seconds, n, count, batch_only=only)
        else:
            found[side] = asyncio.run(_pg_run("api", _api_pg(folder, seconds, n, count, only)))
    if store == "sqlite":
        found["direct"] = asyncio.run(measure_direct(f"sqlite:///{home / 'direct.db'}", seconds, n))
        return found

    async def direct_pg(url: str) -> Any:
        return await measure_direct(url, seconds, n)

    async def pgq(url: str) -> Any:
        return await measure_pgqueuer(url, seconds, n)

    found["direct"] = asyncio.run(_pg_run("direct", direct_pg))
    found["pgqueuer"] = asyncio.run(_pg_run("pgq", pgq))
    return found


def _api_pg(home: Path, seconds: float, n: int, workers: int, batch_only: bool) -> Any:
    async def api_pg(url: str) -> Any:
        return await asyncio.to_thread(
            measure_api, url, home, seconds, n, workers, batch_only=batch_only
        )

    return api_pg


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2, help="runs of everything, for ranges")
    p.add_argument("--workers", default="1", help="server processes, e.g. 1,2: batch per count")
    p.add_argument("--batch-only", action="store_true", help="only the batched rows")
    args = p.parse_args()
    workers = [int(w) for w in args.workers.split(",") if w]
    _hey()
    stores = [s for s in args.stores.split(",") if s]
    if "postgres" in stores and not asyncio.run(pg_reachable()):
        raise SystemExit(f"no Postgres at {PG_ADMIN}")
    report: dict[str, Any] = {
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "batch": BATCH,
        "workers": workers,
        "targets": TARGETS,
        "load_before": os.getloadavg()[0],
        "runs": [],
    }
    for _ in range(args.repeat):
        run: dict[str, Any] = {}
        bare = None if args.batch_only else measure_bare(args.seconds, args.concurrency)
        for store in stores:
            with tempfile.TemporaryDirectory(prefix="omnipost-api-bench-") as folder:
                result = run_store(
                    store, Path(folder), bare, args.seconds, args.concurrency, workers
                )
            result["ratios"] = _ratios(result)
            run[store] = result
        report["runs"].append(run)
    report["load_after"] = os.getloadavg()[0]
    emit(report, args.out)


if __name__ == "__main__":
    main()
