"""Many workers, many tenants: does every worker added add throughput, and where does the CPU go?

The setup of ``bench/tenants.py`` (N tenants at 20/s, burst 10; three ``simulated`` providers at
5 ms sharing 2,000/s; a backlog over every (tenant, provider) deep enough to last the run), on
Postgres with the Redis limiter, served by W ``omnipost worker --concurrency 32 --duration D
--redis ...`` processes started together. Measured per (tenants, workers):

- the steady rate of the second half (every worker's deliveries, from ``delivery_log``) against
  what the limits allow, and whether every tenant's and provider's envelope held at the
  provider (``burst + rate x (W + 0.02) + 1``);
- CPU per delivery: the workers' (their rusage), Postgres's and Redis's (from /proc: the
  postmaster with its reaped backends, and redis-server), each over the whole run (start-up
  included: a worker's start at 10,000 tenants costs about a second and a half of CPU, which a
  16 s run spreads over few deliveries) and over the steady window (half the run to a second
  before its end: what a delivery costs while the workers dispatch);
- the keys whose claim found no row (another worker leased them first) per delivery, the
  claims made, the longest stall of each worker's loop, and how many workers fell back to a
  local share of the limits (they say so in their log) and how many saw their loop late;
- with ``--profile DIR``, each worker runs under cProfile (slower: for where, not how fast),
  and the report lists the functions with the most own time over all workers.

    .venv/bin/python bench/workers.py [--tenants 1000,10000] [--workers 1,2,4]
        [--duration 16] [--repeat 1] [--profile DIR] [--logs DIR] [--out FILE]
"""

from __future__ import annotations

import asyncio
import os
import pstats
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import REDIS, emit, fresh_pg, log_level_warning, parser, pg_reachable
from _procs import peak_rss_mb, process_cpu_s, server_cpu_s
from tenants import (
    CONCURRENCY,
    _flush_redis,
    allowed_per_s,
    deliveries,
    over_envelope,
    prepare,
    steady_rate,
)

from engine import SecretBox
from testkit.cli import REPO, clean_env

_WORK = re.compile(
    r"longest loop stall (\d+) ms; (\d+) claims, (\d+) pairs found nothing to lease; "
    r"(\d+) stale tokens"
)


def run_workers(
    url: str,
    key: str,
    workers: int,
    duration_s: float,
    profile: Path | None,
    logs: Path | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``workers`` worker processes started together; per worker: its CPU seconds, what its
    last lines said (loop stall, claims, pairs that found nothing), fallbacks and late loops."""
    procs = []
    for i in range(workers):
        env = clean_env(Path(tempfile.mkdtemp(prefix="omnipost-workers-")), OMNIPOST_KEYS=key)
        args = ["--db", url, "--concurrency", str(CONCURRENCY), "--duration", str(duration_s)]
        args += ["--redis", REDIS]
        run = ["-m", "app", "worker", *args]
        if profile is not None:
            run = ["-m", "cProfile", "-o", str(profile / f"worker{i}.prof"), *run]
        procs.append(
            subprocess.Popen(
                [sys.executable, *run],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = [""] * workers

    def read(i: int) -> None:
        stdout = procs[i].stdout
        assert stdout is not None
        outputs[i] = stdout.read().decode(errors="replace")

    readers = [threading.Thread(target=read, args=(i,)) for i in range(workers)]
    for reader in readers:
        reader.start()
    window = _Window([proc.pid for proc in procs], duration_s)
    window.start()
    found = []
    for i, proc in enumerate(procs):
        _pid, status, usage = os.wait4(proc.pid, 0)
        readers[i].join()
        if logs is not None:
            (logs / f"worker{i}.log").write_text(outputs[i])
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"worker {i} failed:\n{outputs[i][-3000:]}")
        work = _WORK.search(outputs[i])
        found.append(
            {
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "stall_ms": int(work.group(1)) if work else None,
                "claims": int(work.group(2)) if work else None,
                "claims_empty": int(work.group(3)) if work else None,
                "stale_tokens": int(work.group(4)) if work else None,
                "fell_back": outputs[i].count("is unavailable"),
                "late_loop_lines": outputs[i].count("event loop was"),
            }
        )
    window.join()
    return found, window.figures


class _Window(threading.Thread):
    """CPU seconds of the workers and the servers at the start and the end of the steady
    window (from half the run to a second before its end, where start-up and stopping cost
    nothing): what a delivery costs while they dispatch, whatever the run's length."""

    def __init__(self, pids: list[int], duration_s: float) -> None:
        super().__init__(daemon=True)
        self._pids = pids
        self._begin = time.time() + duration_s / 2
        self._end = time.time() + duration_s - 1.0
        self.figures: dict[str, Any] = {}

    def _sample(self) -> dict[str, float | None]:
        cpus = [process_cpu_s(pid) for pid in self._pids]
        workers = None if any(c is None for c in cpus) else sum(c or 0.0 for c in cpus)
        return {"at": time.time(), "workers": workers, **server_cpu_s()}

    def run(self) -> None:
        time.sleep(max(0.0, self._begin - time.time()))
        first = self._sample()
        time.sleep(max(0.0, self._end - time.time()))
        self.figures = {"from": first, "to": self._sample()}
        rss = [peak_rss_mb(pid) for pid in self._pids]  # a second before the end: alive
        self.figures["rss_mb"] = [None if r is None else round(r, 1) for r in rss]


def steady_cpu(window: dict[str, Any], sent_at: list[float]) -> dict[str, float | None]:
    """CPU ms per delivery of the workers, Postgres and Redis over the steady window."""
    if not window:
        return {}
    first, last = window["from"], window["to"]
    delivered = sum(1 for t in sent_at if first["at"] <= t < last["at"]) or 1
    return {
        f"steady_{name}_cpu_ms_per_delivered": (
            None
            if first[name] is None or last[name] is None
            else round((last[name] - first[name]) * 1000 / delivered, 3)
        )
        for name in ("workers", "postgres", "redis")
    }


async def one_run(
    tenants: int, workers: int, duration_s: float, profile: Path | None, logs: Path | None
) -> Any:
    key = SecretBox.generate_key()
    await _flush_redis(REDIS)
    async with fresh_pg(f"workers{tenants}w{workers}") as url:
        prepared = await prepare(url, key, tenants, duration_s)
        before, t0 = server_cpu_s(), time.monotonic()
        each, window = await asyncio.to_thread(
            run_workers, url, key, workers, duration_s, profile, logs
        )
        after, wall_s = server_cpu_s(), time.monotonic() - t0
        sent = await deliveries(url)
    ts = sorted(t for _tenant, _provider, t in sent)
    rate, allowed = steady_rate(ts), allowed_per_s(tenants)
    delivered = max(len(ts), 1)
    servers = {
        f"{name}_cpu_ms_per_delivered": (
            None
            if before[name] is None or after[name] is None
            else round((after[name] - before[name]) * 1000 / delivered, 3)  # type: ignore[operator]
        )
        for name in ("postgres", "redis")
    }
    claims = [w["claims_empty"] for w in each if w["claims_empty"] is not None]
    stale = [w["stale_tokens"] for w in each if w["stale_tokens"] is not None]
    return {
        "tenants": tenants,
        "workers": workers,
        **prepared,
        "wall_s": round(wall_s, 1),
        "delivered": len(ts),
        "steady_per_s": round(rate),
        "allowed_per_s": round(allowed),
        "ratio": round(rate / allowed, 3),
        "workers_cpu_ms_per_delivered": round(sum(w["cpu_s"] for w in each) * 1000 / delivered, 3),
        **servers,
        **steady_cpu(window, ts),
        "empty_claims_per_delivered": round(sum(claims) / delivered, 3) if claims else None,
        # Sends that started too late after their tokens, which were taken again.
        "stale_tokens_per_delivered": round(sum(stale) / delivered, 3) if stale else None,
        "claims": sum(w["claims"] or 0 for w in each),
        "longest_stall_ms": [w["stall_ms"] for w in each],
        "rss_mb": window.get("rss_mb", []),
        "per_second": per_second(ts),
        "fell_back": sum(1 for w in each if w["fell_back"]),
        "late_loop_workers": sum(1 for w in each if w["late_loop_lines"]),
        **over_envelope(sent),
    }


def per_second(ts: list[float]) -> list[int]:
    """Deliveries in each second from the first: a dip shows when the workers stalled."""
    if not ts:
        return []
    counts = [0] * (int(ts[-1] - ts[0]) + 1)
    for t in ts:
        counts[int(t - ts[0])] += 1
    return counts


def hot_functions(profile: Path, top: int = 20) -> list[dict[str, Any]]:
    """The functions with the most own time over every worker's profile in ``profile``."""
    files = sorted(str(p) for p in profile.glob("worker*.prof"))
    if not files:
        return []
    stats = pstats.Stats(files[0])
    for extra in files[1:]:
        stats.add(extra)
    rows = []
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values()) or 1.0
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in table.items():
        where = filename.replace(str(REPO) + "/", "")
        rows.append((tottime, f"{where}:{line}({name})", calls, cumtime))
    rows.sort(reverse=True)
    return [
        {"function": f, "calls": c, "own_s": round(t, 2), "own_share": round(t / total, 3)}
        for t, f, c, _cum in rows[:top]
    ]


def _writable(folder: Path | None, flag: str) -> None:
    """``folder`` (a ``--logs`` or ``--profile`` folder) exists or is made, before any run."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(
            f"bench/workers.py: {flag} {folder} is not a folder it can write to ({exc.strerror})."
        ) from None


async def main(args: Any) -> dict[str, Any]:
    _writable(args.logs, "--logs")
    _writable(args.profile, "--profile")
    if not await pg_reachable():
        raise SystemExit("bench/workers.py needs PostgreSQL (and Redis)")
    load_before = os.getloadavg()[0]
    runs = []
    for _repeat in range(args.repeat):
        for tenants in [int(n) for n in args.tenants.split(",")]:
            for workers in [int(n) for n in args.workers.split(",")]:
                profile = None
                if args.profile is not None:
                    profile = args.profile / f"t{tenants}w{workers}"
                    profile.mkdir(parents=True, exist_ok=True)
                logs = None
                if args.logs is not None:
                    logs = args.logs / f"t{tenants}w{workers}r{_repeat}"
                    logs.mkdir(parents=True, exist_ok=True)
                run = await one_run(tenants, workers, args.duration, profile, logs)
                if profile is not None:
                    run["hot_functions"] = hot_functions(profile)
                runs.append(run)
                print(run, file=sys.stderr, flush=True)
    return {
        "benchmark": "workers",
        "duration_s": args.duration,
        "concurrency": CONCURRENCY,
        "load_before": load_before,
        "profiled": args.profile is not None,
        "runs": runs,
    }


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--tenants", default="1000,10000")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--duration", type=float, default=16.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--profile", type=Path, help="run workers under cProfile, files here")
    p.add_argument("--logs", type=Path, help="keep each worker's output here")
    cli = p.parse_args()
    log_level_warning()
    emit(asyncio.run(main(cli)), cli.out)
