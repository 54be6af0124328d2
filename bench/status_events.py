"""Status events (issue 48): what telling the tenants' applications costs the sends, how fast
events reach an application, and that the outbox stays bounded. Side by side in one run, on
each store:

- **drain**: 20,000 notifications of one tenant (no limits, a provider with no latency) drained
  by one engine, on a store where the tenant has no endpoint and on one where it has one
  subscribed to every event at the default pace (50/s, burst 100): every delivery writes an
  event in its transaction and the same process posts them; deliveries per second each,
  alternating, and the ratio (the issue asks 0.8 or more). The application is a bare ASGI app
  on uvicorn in a process of its own (``bench/_provider_server.py``, ``/events``: 204 at once).
- **events**: 100 tenants, each with an endpoint at 100,000/s (no pace to speak of), 20,000
  notifications delivered with no courier running; then a courier alone delivers their events:
  events per second, beside a bare httpx client posting as many bodies of the same size to the
  same application at the same concurrency (the client the courier first used), and beside
  prepared requests written on asyncio's own streams (the application's ceiling).
- **retention**: the outbox's rows once every event of the second part is delivered, and after
  a prune as a week later (the delivery log's window): none left.

Prints JSON. Usage: python bench/status_events.py [--count 20000] [--repeat 3] [--skip-pg]
    [--out FILE]
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import (
    drain_rate,
    emit,
    fresh_pg,
    log_level_warning,
    open_store,
    parser,
    pg_reachable,
    spread,
)

from engine import (
    BUILTIN_KINDS,
    CourierSettings,
    DispatcherSettings,
    Engine,
    EngineSettings,
    EnqueueItem,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
    event_body,
    rfc3339,
)
from testkit.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 100
CHUNK = 1000
WEEK_S = 7 * 86_400.0


class Application:
    """The bare application: uvicorn serving ``_provider_server:app`` in its own process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def __enter__(self) -> Application:
        bench = str(ROOT / "bench")
        cmd = [sys.executable, "-m", "uvicorn", "_provider_server:app", "--app-dir", bench]
        cmd += ["--port", str(self.port), "--no-access-log", "--log-level", "warning"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=bench,
            env={**os.environ, "PYTHONPATH": bench},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.post(self.url, timeout=1).status_code == 204:
                    return self
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"no answer from {self.url}") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _engine(store: Store, *, courier: bool = True) -> Engine:
    settings = EngineSettings(
        dispatch=DispatcherSettings(concurrency=32, batch=32),
        events=CourierSettings() if courier else None,
    )
    return Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)


async def _setup(engine: Engine, tenants: int, hook: str | None, rate: float | None) -> None:
    await engine.provider_add("noop", "simulated", options={"latency_ms": "0"})
    for t in range(tenants):
        await engine.tenant_add(f"t{t:03d}")
        if hook is not None:
            burst = None if rate is None else rate
            await engine.webhook_add(
                f"t{t:03d}", hook, allow_private=True, rate_per_s=rate, burst=burst
            )


async def _enqueue(engine: Engine, count: int, tenants: int, tag: str) -> None:
    per = count // tenants
    for t in range(tenants):
        for first in range(0, per, CHUNK):
            items = [
                EnqueueItem("noop", f"u{i}@t{t}.example", {"i": i}, f"{tag}-{i}")
                for i in range(first, min(per, first + CHUNK))
            ]
            await engine.enqueue_many(f"t{t:03d}", items)


async def drain_side_by_side(
    urls: tuple[str, str], hook: str, count: int, repeat: int
) -> dict[str, Any]:
    """One tenant's drain without and with one endpoint taking every event."""
    rates: dict[str, list[float]] = {"without": [], "with": []}
    async with (
        open_store(urls[0], SecretBox([SecretBox.generate_key()])) as (bare, _),
        open_store(urls[1], SecretBox([SecretBox.generate_key()])) as (hooked, _),
    ):
        for store, url in ((bare, None), (hooked, hook)):
            async with _engine(store) as engine:
                await _setup(engine, 1, url, None)
        for run in range(repeat):
            for label, store in (("without", bare), ("with", hooked)):
                async with _engine(store) as engine:
                    await _enqueue(engine, count, 1, f"run{run}")
                    rates[label].append(await drain_rate(engine, count))
        waiting = await _rows(hooked, "state <> 'delivered'")
    return {
        "notifications": count,
        "without_per_s": spread(rates["without"], 0),
        "with_endpoint_per_s": spread(rates["with"], 0),
        "ratio": round(statistics.median(rates["with"]) / statistics.median(rates["without"]), 3),
        "events_waiting_at_the_end": waiting,  # at 50/s, the default pace, after the drains
    }


async def events_beside_a_client(url: str, hook: str, count: int) -> dict[str, Any]:
    """A courier alone delivering ``count`` events of 100 unpaced endpoints; then a bare httpx
    client posting as many bodies of the same size at the same concurrency."""
    async with open_store(url) as (store, _):
        async with _engine(store, courier=False) as engine:
            await _setup(engine, TENANTS, hook, 100_000.0)
            await _enqueue(engine, count, TENANTS, "events")
            await drain_rate(engine, count)
        async with _engine(store) as engine:
            started = time.perf_counter()
            await engine.start()
            courier = engine.courier
            assert courier is not None
            while courier.delivered < count:
                if engine.failure:
                    raise RuntimeError(engine.failure)
                await asyncio.sleep(0.05)
            events_s = time.perf_counter() - started
            await engine.stop()
        kept = await _rows(store)
        retention = await store.maintenance.retention()
        pruned = await store.maintenance.prune(retention, now=time.time() + WEEK_S + 60)
        left = await _rows(store)
    concurrency = CourierSettings().concurrency
    data = {
        "id": 12345,
        "tenant": "t000",
        "provider": "noop",
        "state": "delivered",
        "attempt": 1,
        "max_attempts": 5,
        "sequence": 3,
        "idempotency_key": "events-12345",
        "recipient": "u***@t***.example",
    }
    sample = event_body("notification.delivered", rfc3339(time.time(), "milliseconds"), data)
    async with httpx.AsyncClient(
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    ) as client:
        gate = asyncio.Semaphore(concurrency)
        body = sample

        async def one() -> None:
            async with gate:
                await client.post(hook, content=body, headers={"webhook-id": "evt_1"})

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        client_s = time.perf_counter() - started
    raw_s = await _raw_posts(hook, sample, count, concurrency)
    return {
        "events": count,
        "endpoints": TENANTS,
        "courier_events_per_s": round(count / events_s),
        "httpx_client_posts_per_s": round(count / client_s),
        "raw_posts_per_s": round(count / raw_s),
        "vs_httpx": round(client_s / events_s, 3),
        "vs_raw": round(raw_s / events_s, 3),
        "outbox_rows_delivered": kept,
        "pruned_a_week_later": pruned.status_events,
        "outbox_rows_after_prune": left,
    }


async def _raw_posts(url: str, body: bytes, count: int, concurrency: int) -> float:
    """The application's ceiling: ``count`` prepared requests written on ``concurrency`` kept
    connections of asyncio's own streams, reading each answer's head only; seconds taken."""
    parts = httpx.URL(url)
    port = parts.port or 80
    head = (
        f"POST {parts.raw_path.decode()} HTTP/1.1\r\nHost: {parts.host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    request = head.encode() + body

    async def connection(n: int) -> None:
        reader, writer = await asyncio.open_connection(parts.host, port)
        for _ in range(n):
            writer.write(request)
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # 204: no body
        writer.close()

    started = time.perf_counter()
    share = [
        count // concurrency + (1 if i < count % concurrency else 0) for i in range(concurrency)
    ]
    await asyncio.gather(*(connection(n) for n in share))
    return time.perf_counter() - started


async def _rows(store: Store, where: str = "true") -> int:
    import sqlalchemy as sa

    async def tx(conn: Any) -> int:
        query = sa.text(f"SELECT count(*) FROM status_events WHERE {where}")
        return int((await conn.execute(query)).scalar())

    return await store._db.read(tx)


async def main_async(count: int, repeat: int, skip_pg: bool) -> dict[str, Any]:
    log_level_warning()
    report: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="omnipost-events-"))
    with Application() as app:
        urls = (f"sqlite:///{folder / 'bare.db'}", f"sqlite:///{folder / 'hooked.db'}")
        report["sqlite"] = {
            "drain": await drain_side_by_side(urls, app.url, count, repeat),
            "events": await events_beside_a_client(
                f"sqlite:///{folder / 'events.db'}", app.url, count
            ),
        }
        if skip_pg or not await pg_reachable():
            report["postgres"] = None
        else:
            async with (
                fresh_pg("events_bare") as bare,
                fresh_pg("events_hooked") as hooked,
                fresh_pg("events_alone") as alone,
            ):
                report["postgres"] = {
                    "drain": await drain_side_by_side((bare, hooked), app.url, count, repeat),
                    "events": await events_beside_a_client(alone, app.url, count),
                }
    return report


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-pg", action="store_true")
    args = p.parse_args()
    emit(asyncio.run(main_async(args.count, args.repeat, args.skip_pg)), args.out)


if __name__ == "__main__":
    main()
