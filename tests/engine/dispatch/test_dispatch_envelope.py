"""The rate envelope: first the checker itself, then real runs through the file provider.

Every run is a real engine on a real store (SQLite and Postgres); the timestamps are the
``ts`` values the file provider wrote at each send. The runs are on virtual time
(testkit/virtual_time.py): a limiter paces them exactly, whatever the load on the machine, so
the pace is checked tightly. ``test_real_time_*`` runs one on the system clock, as the proof
that the real clock is wired.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import DispatcherSettings, EngineSettings, FakeClock, Limit, Store
from testkit.envelope import check_envelope, min_in_window
from testkit.stores import EngineFactory
from testkit.support import Line, assert_each_key_once, enqueue_numbered, read_lines
from testkit.virtual_time import VirtualEngines, file_kind

# -- the checker --------------------------------------------------------------------------


def paced(rate_per_s: float, burst: int, n: int) -> list[float]:
    """What a perfect bucket admits: ``burst`` at once, then one every 1/rate seconds."""
    return [0.0] * burst + [(i + 1) / rate_per_s for i in range(n - burst)]


# Rates and windows that are exact in binary, so a perfect run lands exactly on the bound.
EXACT_WINDOWS_S = (0.125, 0.5, 1.0, 2.0, 4.0)


def test_a_perfect_bucket_fills_every_window_to_burst_plus_rate() -> None:
    found = check_envelope(paced(128.0, 16, 1000), 128.0, 16.0, windows=EXACT_WINDOWS_S)
    assert found == {w: 16 + 128 * w for w in EXACT_WINDOWS_S}


def test_one_delivery_over_the_bound_fails() -> None:
    run = paced(8.0, 4, 40)  # W = 0.125 allows 4 + 1 + 1; [0, 0.125] holds 4 + 1: one to spare
    check_envelope([*run, 0.0625], 8.0, 4.0, windows=EXACT_WINDOWS_S)
    with pytest.raises(AssertionError, match=r"7 deliveries in the 0\.125 s from 0\.000000"):
        check_envelope([*run, 0.0625, 0.0625], 8.0, 4.0, windows=EXACT_WINDOWS_S)


def test_a_rate_a_little_too_high_shows_only_in_long_windows() -> None:
    fast = [i / 104.0 for i in range(600)]  # 4% over 100/s, never a burst
    check_envelope(fast, 100.0, 5.0, windows=(0.1, 0.5, 1.0))
    with pytest.raises(AssertionError, match=r"in the 2 s from"):
        check_envelope(fast, 100.0, 5.0)


def test_min_in_window_finds_a_stall() -> None:
    steady = [i / 64.0 for i in range(193)]  # 0 to 3 s
    assert min_in_window(steady, 1.0) == 65
    stalled = [t for t in steady if not 1.25 < t < 1.75]
    assert min_in_window(stalled, 1.0) == 65 - 31
    assert min_in_window(steady[:60], 1.0) == 0  # shorter than one window
    assert min_in_window([], 1.0) == 0


# -- real runs ----------------------------------------------------------------------------


SIXTEEN = EngineSettings(dispatch=DispatcherSettings(concurrency=16))
# A run takes at least its ideal time and at most this much longer: the store takes 20 ms a
# call here, and the dispatcher visits keys one after another, so it falls a little behind
# the rate where keys share its loop. (1e-6 below: wall-clock seconds are floats near 1.7e9.)
PACE = 1.25


@pytest.fixture
async def engines(store: Store) -> AsyncIterator[VirtualEngines]:
    """Opens engines on virtual time, on a store that takes 20 ms a call (the dispatcher
    claims what the limiter granted meanwhile, as it does on a real one); the file kind
    stamps each line with virtual time."""
    clock = FakeClock(autojump=True)
    opened = VirtualEngines(store, clock, {"file": file_kind(clock)}, store_latency_s=0.02)
    yield opened
    await opened.close()


def stamps(lines: list[Line], tenant: str | None = None) -> list[float]:
    return sorted(float(line["ts"]) for line in lines if tenant is None or line["tenant"] == tenant)


async def test_a_tenant_limit_holds_over_every_window_of_a_1200_run(
    engines: VirtualEngines, tmp_path: Path
) -> None:
    """200/s, burst 20, 1,200 queued (6 s, longer than the longest window): every window
    holds, and the backlog keeps the pace."""
    rate, burst, n = 200.0, 20.0, 1200
    out = tmp_path / "out.jsonl"
    engine = await engines.open(SIXTEEN)
    await engine.tenant_add("acme", Limit(rate, burst))
    await engine.provider_add("f", "file", options={"path": str(out)})
    await enqueue_numbered(engine, "acme", "f", n)
    await engine.start()
    await engines.until_empty(engine)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"acme-{i}" for i in range(n)})
    ts = stamps(lines)
    check_envelope(ts, rate, burst)
    ideal_s = (n - burst) / rate  # 5.9 s
    span_s = ts[-1] - ts[0]
    assert ideal_s - 1e-6 <= span_s <= ideal_s * PACE, f"took {span_s:.3f}s, ideal {ideal_s}s"
    middle = [t for t in ts if ts[0] + 1.0 <= t <= ts[-1] - 1.0]
    assert min_in_window(middle, 1.0) >= 0.95 * rate  # the backlog keeps the pace


async def test_a_provider_limit_holds_across_tenants(
    engines: VirtualEngines, tmp_path: Path
) -> None:
    rate, burst, per_tenant = 100.0, 10.0, 150
    out = tmp_path / "out.jsonl"
    engine = await engines.open(SIXTEEN)
    for tenant in ("a", "b"):
        await engine.tenant_add(tenant)
    await engine.provider_add("f", "file", limit=Limit(rate, burst), options={"path": str(out)})
    for tenant in ("a", "b"):
        await enqueue_numbered(engine, tenant, "f", per_tenant)
    await engine.start()
    await engines.until_empty(engine)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"{t}-{i}" for t in ("a", "b") for i in range(per_tenant)})
    ts = stamps(lines)
    check_envelope(ts, rate, burst, windows=(0.1, 0.5, 1.0, 2.0))
    ideal_s = (2 * per_tenant - burst) / rate  # 2.9 s
    assert ideal_s - 1e-6 <= ts[-1] - ts[0] <= ideal_s * PACE
    # Round-robin: by the time half the run is sent, each tenant has had a fair share of it.
    half = ts[len(ts) // 2]
    for tenant in ("a", "b"):
        assert len([t for t in stamps(lines, tenant) if t <= half]) >= 0.4 * len(ts) / 2


async def test_a_pair_limit_holds_for_its_pair_only(
    engines: VirtualEngines, tmp_path: Path
) -> None:
    rate, burst, n = 100.0, 10.0, 200
    out = tmp_path / "out.jsonl"
    engine = await engines.open(SIXTEEN)
    for tenant in ("slow", "free"):
        await engine.tenant_add(tenant)
    await engine.provider_add("f", "file", options={"path": str(out)})
    await engine.pair_limit_set("slow", "f", Limit(rate, burst))
    for tenant in ("slow", "free"):
        await enqueue_numbered(engine, tenant, "f", n)
    await engine.start()
    await engines.until_empty(engine)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"{t}-{i}" for t in ("slow", "free") for i in range(n)})
    slow, free = stamps(lines, "slow"), stamps(lines, "free")
    check_envelope(slow, rate, burst, windows=(0.1, 0.5, 1.0))
    ideal_s = (n - burst) / rate  # 1.9 s
    assert ideal_s - 1e-6 <= slow[-1] - slow[0] <= ideal_s * PACE
    assert free[-1] - free[0] < ideal_s / 2  # the other tenant on that provider is not held


@pytest.mark.slow
async def test_real_time_a_tenant_limit_holds_on_the_system_clock(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    """The same run, shorter, on real time: the limiter and the stamps read the system clock.
    Only the envelope and a lower bound on the pace are checked: a loaded machine may be
    slower, never faster."""
    rate, burst, n = 200.0, 20.0, 300
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=16)
    await engine.tenant_add("acme", Limit(rate, burst))
    await engine.provider_add("f", "file", options={"path": str(out)})
    await enqueue_numbered(engine, "acme", "f", n)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=60)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"acme-{i}" for i in range(n)})
    ts = stamps(lines)
    check_envelope(ts, rate, burst)
    ideal_s = (n - burst) / rate  # 1.4 s
    assert ideal_s * 0.95 <= ts[-1] - ts[0] <= ideal_s * 3, f"took {ts[-1] - ts[0]:.2f}s"
