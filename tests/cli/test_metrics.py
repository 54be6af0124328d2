"""The Prometheus endpoint: what a snapshot becomes, the telemetry behind it, the flags, and
real scrapes (with httpx) of an exporter, a worker process and the console.

The exposition is parsed back with ``prometheus_client.parser``, so the tests check what a
Prometheus server would read: names, types, labels and values.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import (
    OTHERS,
    PAIRS_SHOWN,
    MetricsAddress,
    MetricsExporter,
    SnapshotCollector,
    metrics_address,
)
from app.parser import build_parser
from engine import (
    BUILTIN_KINDS,
    BucketKey,
    BucketLevel,
    Circuit,
    CircuitState,
    ConfigError,
    Counters,
    Engine,
    EnqueueItem,
    FakeClock,
    Limit,
    LocalLimiter,
    Outcome,
    QueueTotals,
    SecretBox,
    Snapshot,
    Store,
    StoreUnavailable,
    SystemClock,
    TenantDepth,
)
from engine.telemetry.figures import (
    DELIVERY_BOUNDS_S,
    SEND_BOUNDS_S,
    Histogram,
    PairCounts,
    Telemetry,
)
from testkit.cli import REPO, Cli, assert_one_sentence, clean_env, start_worker
from testkit.redis_server import free_port
from testkit.support import eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

CANARY = "canary-recipient"  # in every recipient the tests enqueue; never in a scrape


def scrape_text(snap: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector()
    collector.update(snap)
    registry.register(collector)
    return generate_latest(registry).decode()


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(type of each family, value of each sample by name and labels)."""
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[s.name, frozenset(s.labels.items())] = s.value
    return types, samples


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def nothing_listens(port: int) -> bool:
    """Whether a connection to ``port`` on loopback is refused (a closed server's port may
    still be in TIME_WAIT, so binding it again is no test)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return False
    except ConnectionRefusedError:
        return True


def known_snapshot(ts: float = 1_000.0) -> Snapshot:
    return Snapshot(
        ts=ts,
        state="running",
        worker_id="host-1-abcd",
        concurrency=8,
        inflight=3,
        limiter_backend="local-fallback",
        buckets=(
            BucketLevel(BucketKey.for_tenant("acme"), 4.5, 10.0, 5.0),
            BucketLevel(BucketKey.for_pair("acme", "sms"), 1.0, 2.0, 1.0, blocked_for_s=3.0),
        ),
        depth=(
            TenantDepth("acme", 7, 2, 40, 1, oldest_queued_age_s=12.5, suppressed=3),
            TenantDepth("globex", 0, 0, 3, 0, oldest_queued_age_s=None),
        ),
        totals=Counters(
            delivered=43,
            throttled=2,
            failed=1,
            dead=1,
            takeovers=4,
            reaped=5,
            stale_tokens=6,
            suppressed=7,
            gone=2,
        ),
        delivered_per_s=1.0,
        throttled_per_s=0.0,
        failed_per_s=0.0,
        latency_p50_s=None,
        latency_p95_s=None,
        latency_p99_s=None,
        loop_lag_s=0.25,
        health=(
            Circuit("sms", CircuitState.OPEN, since=990.0, last_error="refused", failures=3),
            Circuit("mail", CircuitState.CLOSED),
        ),
        outcomes=(
            PairCounts("acme", "sms", delivered=40, throttled=2, failed=1, dead=1),
            PairCounts("globex", "mail", delivered=3),
        ),
        send_durations=(Histogram("sms", (0.1, 1.0), (5, 9), 10, 4.5),),
        delivery_latencies=(Histogram("sms", (1.0,), (2,), 3, 7.0),),
        queue=QueueTotals(
            queued=7, leased=2, delivered=43, dead=1, suppressed=3, tenants_queued=None
        ),
    )


TENANT_BUCKET = labels(bucket="tenant:acme", scope="tenant", tenant="acme", provider="")
PAIR_BUCKET = labels(bucket="pair:acme/sms", scope="pair", tenant="acme", provider="sms")

# (sample name, labels, value) the known snapshot must expose
EXPECTED: list[tuple[str, frozenset[tuple[str, str]], float]] = [
    ("omnipost_notifications_delivered_total", labels(tenant="acme", provider="sms"), 40),
    ("omnipost_notifications_delivered_total", labels(tenant="globex", provider="mail"), 3),
    ("omnipost_notifications_throttled_total", labels(tenant="acme", provider="sms"), 2),
    ("omnipost_notifications_failed_total", labels(tenant="acme", provider="sms"), 1),
    ("omnipost_notifications_dead_total", labels(tenant="acme", provider="sms"), 1),
    ("omnipost_notifications_dead_total", labels(tenant="globex", provider="mail"), 0),
    ("omnipost_lease_takeovers_total", labels(), 4),
    ("omnipost_leases_reaped_total", labels(), 5),
    ("omnipost_stale_tokens_total", labels(), 6),
    ("omnipost_notifications_suppressed_total", labels(), 7),
    ("omnipost_recipients_gone_total", labels(), 2),
    ("omnipost_queue_notifications", labels(state="suppressed"), 3),
    ("omnipost_queue_depth", labels(tenant="acme", state="suppressed"), 3),
    ("omnipost_queue_notifications", labels(state="queued"), 7),
    ("omnipost_queue_notifications", labels(state="delivered"), 43),
    ("omnipost_queue_depth", labels(tenant="acme", state="queued"), 7),
    ("omnipost_queue_depth", labels(tenant="acme", state="leased"), 2),
    ("omnipost_queue_depth", labels(tenant="acme", state="delivered"), 40),
    ("omnipost_queue_depth", labels(tenant="acme", state="dead"), 1),
    ("omnipost_queue_depth", labels(tenant="globex", state="queued"), 0),
    ("omnipost_queue_oldest_age_seconds", labels(tenant="acme"), 12.5),
    ("omnipost_queue_oldest_age_seconds", labels(tenant="globex"), 0),
    ("omnipost_bucket_tokens", TENANT_BUCKET, 4.5),
    ("omnipost_bucket_capacity", TENANT_BUCKET, 10),
    ("omnipost_bucket_rate_per_second", PAIR_BUCKET, 1),
    ("omnipost_bucket_blocked_seconds", PAIR_BUCKET, 3),
    ("omnipost_send_duration_seconds_bucket", labels(provider="sms", le="0.1"), 5),
    ("omnipost_send_duration_seconds_bucket", labels(provider="sms", le="1.0"), 9),
    ("omnipost_send_duration_seconds_bucket", labels(provider="sms", le="+Inf"), 10),
    ("omnipost_send_duration_seconds_count", labels(provider="sms"), 10),
    ("omnipost_send_duration_seconds_sum", labels(provider="sms"), 4.5),
    ("omnipost_delivery_latency_seconds_bucket", labels(provider="sms", le="1.0"), 2),
    ("omnipost_delivery_latency_seconds_count", labels(provider="sms"), 3),
    ("omnipost_provider_circuit_open", labels(provider="sms"), 1),
    ("omnipost_provider_circuit_open", labels(provider="mail"), 0),
    ("omnipost_provider_circuit_state", labels(provider="sms", state="open"), 1),
    ("omnipost_provider_circuit_state", labels(provider="sms", state="closed"), 0),
    ("omnipost_provider_circuit_state", labels(provider="mail", state="closed"), 1),
    ("omnipost_provider_failures", labels(provider="sms"), 3),
    ("omnipost_worker_info", labels(worker_id="host-1-abcd", limiter="local-fallback"), 1),
    ("omnipost_engine_state", labels(state="running"), 1),
    ("omnipost_engine_state", labels(state="failed"), 0),
    ("omnipost_concurrency", labels(), 8),
    ("omnipost_sends_in_flight", labels(), 3),
    ("omnipost_event_loop_lag_seconds", labels(), 0.25),
]  # fmt: skip

TYPES = {
    "omnipost_notifications_delivered": "counter",
    "omnipost_lease_takeovers": "counter",
    "omnipost_queue_notifications": "gauge",
    "omnipost_queue_depth": "gauge",
    "omnipost_send_duration_seconds": "histogram",
    "omnipost_delivery_latency_seconds": "histogram",
    "omnipost_worker_info": "gauge",  # an info family, as the text format spells it
    "omnipost_provider_circuit_open": "gauge",
}


@pytest.mark.parametrize(("name", "where", "value"), EXPECTED)
def test_a_known_snapshot_as_scraped(
    name: str, where: frozenset[tuple[str, str]], value: float
) -> None:
    _, samples = parse(scrape_text(known_snapshot()))
    assert samples.get((name, where)) == pytest.approx(value), sorted(
        k for k in samples if k[0] == name
    )


def test_types_and_names_follow_the_conventions() -> None:
    text = scrape_text(known_snapshot())
    types, samples = parse(text)
    assert {k: types.get(k) for k in TYPES} == TYPES
    for name, _ in samples:
        assert name.startswith("omnipost_"), name
        assert name == name.lower() and " " not in name
    # Units in the name, values in labels: no tenant, provider or state in any metric's name.
    assert not [n for n, _ in samples if any(w in n for w in ("acme", "globex", "sms", "closed"))]


def test_the_snapshot_age_is_taken_at_the_scrape() -> None:
    _, samples = parse(scrape_text(known_snapshot(ts=time.time() - 30.0)))
    assert samples["omnipost_snapshot_age_seconds", labels()] == pytest.approx(30.0, abs=5.0)


def test_nothing_is_served_before_the_first_snapshot() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector())
    assert generate_latest(registry) == b""


# -- the telemetry behind the counters and histograms ----------------------------------------

# (observed seconds, the cumulative count it adds to first): "le" includes the bound itself
SEND_OBSERVATIONS = [(0.0, 0), (-1.0, 0), (0.005, 0), (0.0051, 1), (1.0, 7), (30.0, 11), (31.0, 12)]


@pytest.mark.parametrize(("value_s", "first"), SEND_OBSERVATIONS)
def test_a_send_lands_in_the_first_bucket_that_holds_it(value_s: float, first: int) -> None:
    telemetry = Telemetry(FakeClock())
    telemetry.observe_send("sms", value_s)
    [h] = telemetry.send_durations()
    assert h.bounds_s == SEND_BOUNDS_S
    expected = tuple(0 if i < first else 1 for i in range(len(SEND_BOUNDS_S)))
    assert (h.provider, h.cumulative, h.count, h.sum_s) == ("sms", expected, 1, max(0.0, value_s))


def test_outcomes_are_counted_per_pair_and_in_the_totals() -> None:
    telemetry = Telemetry(FakeClock())
    for outcome, dead, pair in [
        (Outcome.DELIVERED, False, ("acme", "sms")),
        (Outcome.DELIVERED, False, ("acme", "sms")),
        (Outcome.THROTTLED, False, ("acme", "sms")),
        (Outcome.TRANSIENT, False, ("globex", "sms")),
        (Outcome.PERMANENT, True, ("globex", "sms")),
    ]:
        telemetry.record(outcome, dead=dead, latency_s=2.0, pair=pair)
    telemetry.record(Outcome.DELIVERED)  # no pair known: the totals only
    assert telemetry.pair_counts() == (
        PairCounts("acme", "sms", delivered=2, throttled=1),
        PairCounts("globex", "sms", failed=1, dead=1),
    )
    assert telemetry.totals() == Counters(delivered=3, throttled=1, failed=1, dead=1)
    [latency] = telemetry.delivery_latencies()  # deliveries with a pair only
    assert (latency.bounds_s, latency.count, latency.sum_s) == (DELIVERY_BOUNDS_S, 2, 4.0)
    assert latency.cumulative[DELIVERY_BOUNDS_S.index(2.5)] == 2


# -- flags --------------------------------------------------------------------------------------

# (--metrics-port, --metrics-host, $OMNIPOST_METRICS_PORT, the address, or the error's words)
ADDRESSES: list[tuple[int | None, str | None, str, MetricsAddress | str | None]] = [
    (None, None, "", None),
    (None, None, "  ", None),
    (9100, None, "", MetricsAddress(9100, "127.0.0.1")),
    (9100, "0.0.0.0", "", MetricsAddress(9100, "0.0.0.0")),
    (None, None, "9200", MetricsAddress(9200)),
    (9100, None, "9200", MetricsAddress(9100)),  # the flag wins
    (9100, None, "nonsense", MetricsAddress(9100)),  # and the variable is not read
    (None, "::1", "9200", MetricsAddress(9200, "::1")),
    (None, None, "nonsense", "OMNIPOST_METRICS_PORT: expected a port number"),
    (None, None, "70000", "OMNIPOST_METRICS_PORT: a port must be from 1 to 65535"),
    (None, "0.0.0.0", "", "--metrics-host needs --metrics-port"),
]


@pytest.mark.parametrize(("port", "host", "env", "expected"), ADDRESSES)
def test_metrics_address(
    port: int | None, host: str | None, env: str, expected: MetricsAddress | str | None
) -> None:
    environ = {"OMNIPOST_METRICS_PORT": env} if env else {}
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            metrics_address(port, host, environ)
    else:
        assert metrics_address(port, host, environ) == expected


def test_urls() -> None:
    assert MetricsAddress(9100).url == "http://127.0.0.1:9100/metrics"
    assert MetricsAddress(9100, "::1").url == "http://[::1]:9100/metrics"


@pytest.fixture
def worker_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Cli:
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    for name in ("OMNIPOST_DB", "OMNIPOST_KEYS", "OMNIPOST_METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)
    cli = Cli(capsys, f"sqlite:///{tmp_path / 'store.db'}")
    cli.ok("migrate")
    return cli


@pytest.mark.parametrize("value", ["0", "65536", "-1", "abc", "9100.5", ""])
def test_a_bad_metrics_port_is_a_usage_error(worker_cli: Cli, value: str) -> None:
    result = worker_cli("worker", "--until-empty", "--metrics-port", value)
    assert result.code == 2
    assert "--metrics-port" in result.err
    assert_one_sentence(result.err)


def test_a_port_in_use_is_one_sentence_and_exit_1(worker_cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = worker_cli("worker", "--until-empty", "--metrics-port", port)
    assert result.code == 1
    assert f"cannot serve metrics on 127.0.0.1 port {port}" in result.err
    assert_one_sentence(result.err)


def test_a_worker_gives_its_port_back(worker_cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("OMNIPOST_METRICS_PORT", str(port))
    result = worker_cli("worker", "--until-empty")
    assert result.code == 0, result.err
    assert f"metrics on http://127.0.0.1:{port}/metrics" in result.err
    assert nothing_listens(port)  # the server was shut down


# -- real scrapes --------------------------------------------------------------------------------


async def test_a_scrape_never_waits_for_the_loop() -> None:
    calls = 0

    async def source() -> Snapshot:
        nonlocal calls
        calls += 1
        return known_snapshot(ts=time.time())

    address = MetricsAddress(free_port())
    async with (
        MetricsExporter(address, refresh_s=3600.0) as exporter,
        exporter.following(source),
    ):
        assert calls == 1  # the first snapshot is there before anything else runs
        # A blocking request from the loop's own thread: the loop cannot run until it
        # returns, so the server's thread answered alone, from the snapshot it holds.
        response = httpx.get(address.url, timeout=10.0)
        assert calls == 1
    assert response.status_code == 200
    assert parse(response.text)[1]["omnipost_concurrency", labels()] == 8


async def test_a_failed_refresh_keeps_the_last_figures(caplog: pytest.LogCaptureFixture) -> None:
    answers = [known_snapshot(ts=time.time())]

    async def source() -> Snapshot:
        if answers:
            return answers.pop()
        raise StoreUnavailable("the store is not answering.")

    address = MetricsAddress(free_port())
    with caplog.at_level(logging.WARNING, logger="app.metrics"):
        async with (
            MetricsExporter(address, refresh_s=0.01) as exporter,
            exporter.following(source),
            httpx.AsyncClient(timeout=10.0) as client,
        ):
            await eventually(lambda: "the store is not answering" in caplog.text)
            text = (await client.get(address.url)).text
    assert parse(text)[1]["omnipost_sends_in_flight", labels()] == 3
    assert nothing_listens(address.port)  # closed on leaving
    assert caplog.text.count("metrics not refreshed") == 1  # said once, not every second


async def test_a_refresher_that_dies_says_so(caplog: pytest.LogCaptureFixture) -> None:
    answers = [known_snapshot(ts=time.time())]

    async def source() -> Snapshot:
        if answers:
            return answers.pop()
        raise RuntimeError("a bug in the snapshot")

    address = MetricsAddress(free_port())
    with caplog.at_level(logging.ERROR, logger="app.metrics"):
        async with (
            MetricsExporter(address, refresh_s=0.01) as exporter,
            exporter.following(source),
            httpx.AsyncClient(timeout=10.0) as client,
        ):
            await eventually(lambda: "metrics stopped refreshing" in caplog.text)
            text = (await client.get(address.url)).text
    assert "a bug in the snapshot" in caplog.text
    assert parse(text)[1]["omnipost_concurrency", labels()] == 8  # the last figures, still


async def test_without_an_address_nothing_listens() -> None:
    async def source() -> Snapshot:
        raise AssertionError("no snapshot is taken when nothing is served")

    async with MetricsExporter(None) as exporter, exporter.following(source):
        assert exporter.says() == ""
    await exporter.aclose()  # a second close is harmless


async def _prepare(tmp_path: Path, key: str, n: int) -> tuple[str, Path]:
    """A SQLite store with tenant acme (25/s, burst 5), a ``file`` provider ``audit`` and ``n``
    notifications to recognisable recipients; returns its URL and the provider's file."""
    url, out = f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "sent.jsonl"
    async with Store(url, SecretBox([key])) as store:
        await store.migrate()
        async with Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
            await engine.provider_add("audit", "file", None, {"path": str(out)})
            await engine.tenant_add("acme", Limit(25.0, 5.0))
            items = [
                EnqueueItem("audit", f"{CANARY}-{i}@example.com", {"i": i}, f"k{i}", 0)
                for i in range(n)
            ]
            await engine.enqueue_many("acme", items)
    return url, out


@pytest.fixture
def reap() -> Iterator[Callable[[subprocess.Popen[bytes]], subprocess.Popen[bytes]]]:
    """Processes to kill at the end of the test if they are still running."""
    procs: list[subprocess.Popen[bytes]] = []

    def keep(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        procs.append(proc)
        return proc

    yield keep
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow
async def test_a_worker_process_is_scraped_while_it_drains(
    tmp_path: Path, reap: Callable[[subprocess.Popen[bytes]], subprocess.Popen[bytes]]
) -> None:
    n, key, port = 100, SecretBox.generate_key(), free_port()
    url, out = await _prepare(tmp_path, key, n)
    log = tmp_path / "worker.log"
    args = ["--db", url, "--quiet", "--metrics-port", str(port)]
    proc = reap(start_worker(args, clean_env(tmp_path, OMNIPOST_KEYS=key), log))
    delivered: list[float] = []
    texts: list[str] = []
    deadline = time.monotonic() + 90.0
    async with httpx.AsyncClient(timeout=10.0) as client:
        while not delivered or delivered[-1] < n:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, (delivered, log.read_text())
            try:
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.TransportError:  # not listening yet
                await asyncio.sleep(0.1)
                continue
            texts.append(response.text)
            samples = parse(response.text)[1]
            pair = labels(tenant="acme", provider="audit")
            if samples:
                delivered.append(samples.get(("omnipost_notifications_delivered_total", pair), 0))
            await asyncio.sleep(0.1)
    assert delivered == sorted(delivered), delivered  # a counter never goes down
    assert any(0 < d < n for d in delivered), delivered  # seen while it drained
    last = parse(texts[-1])[1]
    assert last["omnipost_queue_depth", labels(tenant="acme", state="delivered")] == n
    assert last["omnipost_queue_depth", labels(tenant="acme", state="queued")] == 0
    assert last["omnipost_send_duration_seconds_count", labels(provider="audit")] == n
    assert last["omnipost_delivery_latency_seconds_count", labels(provider="audit")] == n
    assert last["omnipost_bucket_capacity", TENANT_BUCKET] == 5
    assert not [t for t in texts if CANARY in t or key in t or "store.db" in t]
    assert len(out.read_text().splitlines()) == n
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()


CONSOLE = textwrap.dedent(
    """
    import json, socket, sys
    from pathlib import Path
    import httpx
    from PySide6.QtCore import QSettings, QTimer
    from app.paths import Paths
    from app.console import application, run_console, run_on_qt_loop
    from app.metrics import MetricsAddress
    from app.session import Context
    from engine import SecretBox
    from ui import ConsoleSettings

    folder, port = Path(sys.argv[1]), int(sys.argv[2])
    box = SecretBox([SecretBox.generate_key()])
    ctx = Context(Paths(folder), f"sqlite:///{folder / 'console.db'}", box)
    app = application()
    settings = QSettings(str(folder / "console.ini"), QSettings.Format.IniFormat)
    state = {}

    def scrape():
        windows = [w for w in app.topLevelWidgets() if w.objectName() == "OmniPostConsole"]
        if not (windows and windows[0].isVisible() and windows[0].isEnabled()):
            QTimer.singleShot(50, scrape)  # enabled: its engine is open
            return
        # Blocking, on the Qt loop's thread: only the exporter's own thread can answer.
        state["text"] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        windows[0].close()

    QTimer.singleShot(50, scrape)
    run = run_console(
        app, ctx, settings, ConsoleSettings(), dispatch=False, metrics=MetricsAddress(port)
    )
    code = run_on_qt_loop(app, run)
    try:  # the endpoint closed with the console
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
        closed = False
    except ConnectionRefusedError:
        closed = True
    print(json.dumps({"code": code, "text": state.get("text", ""), "closed": closed}))
    """
)


@pytest.mark.slow
def test_the_console_serves_metrics_while_its_window_is_open(tmp_path: Path) -> None:
    script = tmp_path / "console.py"
    script.write_text(CONSOLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIPOST_")}
    env.update(QT_QPA_PLATFORM="offscreen", OMNIPOST_HOME=str(tmp_path), PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    assert result["closed"]
    types, samples = parse(result["text"])
    assert types["omnipost_worker_info"] == "gauge"
    assert samples["omnipost_engine_state", labels(state="idle")] == 1  # --no-dispatch


def test_the_console_and_the_worker_take_the_flags() -> None:

    parser = build_parser()
    console = parser.parse_args(["console", "--metrics-port", "9100", "--metrics-host", "::1"])
    worker = parser.parse_args(["worker", "--metrics-port", "9101"])
    assert (console.metrics_port, console.metrics_host) == (9100, "::1")
    assert (worker.metrics_port, worker.metrics_host) == (9101, None)


def test_outcome_series_are_bounded_whatever_the_pairs() -> None:
    """10,000 tenants on three providers: the first pairs to send keep series of their own,
    every later one is summed per provider under one name no tenant can have."""
    pairs = tuple(
        PairCounts(f"t{i:05d}", provider, delivered=i % 7, dead=1)
        for i in range(10_000)
        for provider in ("sms", "mail", "push")
    )
    snap = dataclasses.replace(known_snapshot(), outcomes=pairs)
    _types, samples = parse(scrape_text(snap))
    delivered = {
        k: v for k, v in samples.items() if k[0] == "omnipost_notifications_delivered_total"
    }
    assert len(delivered) == PAIRS_SHOWN + 3
    first = pairs[0]
    assert (
        delivered[
            "omnipost_notifications_delivered_total", labels(tenant=first.tenant, provider="sms")
        ]
        == 0
    )
    for provider in ("sms", "mail", "push"):
        rest = [p for p in pairs[PAIRS_SHOWN:] if p.provider == provider]
        key = labels(tenant=OTHERS, provider=provider)
        assert delivered["omnipost_notifications_delivered_total", key] == sum(
            p.delivered for p in rest
        )
        assert samples["omnipost_notifications_dead_total", key] == len(rest)
    assert sum(delivered.values()) == sum(p.delivered for p in pairs)  # nothing lost, nothing twice
