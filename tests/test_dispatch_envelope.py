"""The rate envelope: first the checker itself, then real runs through the file provider.

Every run is a real engine on a real store (SQLite and Postgres); the timestamps are the
``ts`` values the file provider wrote at each send.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from engine import Engine, Limit
from tests.conftest import EngineFactory
from tests.envelope import check_envelope, max_in_window, min_in_window

# -- the checker --------------------------------------------------------------------------

# (timestamps, window_s, most in one window [t, t + W] starting at a delivery)
MAX_IN_WINDOW = [
    ([], 1.0, 0),
    ([5.0], 1.0, 1),
    ([0.0, 0.5, 1.0], 1.0, 3),  # closed at both ends
    ([0.0, 0.5, 1.0001], 1.0, 2),
    ([3.0, 1.0, 2.0, 1.5], 1.0, 3),  # unsorted input
    ([0.0, 0.0, 0.0, 7.0], 0.1, 3),  # ties
    ([0.0, 10.0, 10.05, 10.1, 30.0], 0.1, 3),  # the busiest window is not the first
]


@pytest.mark.parametrize(("timestamps", "window_s", "expected"), MAX_IN_WINDOW)
def test_max_in_window(timestamps: list[float], window_s: float, expected: int) -> None:
    assert max_in_window(timestamps, window_s) == expected


@pytest.mark.parametrize("window_s", [0.0, -1.0, float("nan")])
def test_a_window_must_last(window_s: float) -> None:
    with pytest.raises(ValueError, match="window"):
        max_in_window([1.0], window_s)


def test_max_in_window_agrees_with_counting_every_window() -> None:
    rng = random.Random(7)
    for _ in range(200):
        ts = [rng.uniform(0.0, 3.0) for _ in range(rng.randint(0, 40))]
        window_s = rng.choice([0.05, 0.1, 0.5, 1.0])
        brute = max((sum(t <= u <= t + window_s for u in ts) for t in ts), default=0)
        assert max_in_window(ts, window_s) == brute


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


async def enqueue(engine: Engine, tenant: str, provider: str, n: int) -> None:
    items = [
        (provider, f"user{i}@{tenant}.example", {"i": i}, f"{tenant}-{i}", 0) for i in range(n)
    ]
    for start in range(0, n, 1000):
        await engine.enqueue_many(tenant, items[start : start + 1000])


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def stamps(lines: list[dict[str, object]], tenant: str | None = None) -> list[float]:
    return sorted(
        float(line["ts"])  # type: ignore[arg-type]
        for line in lines
        if tenant is None or line["tenant"] == tenant
    )


def assert_each_key_once(lines: list[dict[str, object]], expected: set[str]) -> None:
    keys = [str(line["idempotency_key"]) for line in lines]
    assert len(keys) == len(expected)
    assert set(keys) == expected


async def test_a_tenant_limit_holds_over_every_window_of_a_2000_run(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    """200/s, burst 20, 2,000 queued: every window holds, and the backlog keeps the pace."""
    rate, burst, n = 200.0, 20.0, 2000
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=16)
    await engine.add_tenant("acme", Limit(rate, burst))
    await engine.add_provider("f", "file", options={"path": str(out)})
    await enqueue(engine, "acme", "f", n)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=60)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"acme-{i}" for i in range(n)})
    ts = stamps(lines)
    check_envelope(ts, rate, burst)
    ideal_s = (n - burst) / rate  # 9.9 s
    span_s = ts[-1] - ts[0]
    assert ideal_s * 0.95 <= span_s <= ideal_s * 1.3, f"took {span_s:.2f}s, ideal {ideal_s}s"
    middle = [t for t in ts if ts[0] + 1.0 <= t <= ts[-1] - 1.0]
    # Generous: a shared 2-core machine stalls the loop now and then; a limiter that paced
    # at a fraction of its rate would still fail this by far.
    assert min_in_window(middle, 1.0) >= 0.6 * rate


async def test_a_provider_limit_holds_across_tenants(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    rate, burst, per_tenant = 100.0, 10.0, 150
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=16)
    for tenant in ("a", "b"):
        await engine.add_tenant(tenant)
    await engine.add_provider("f", "file", limit=Limit(rate, burst), options={"path": str(out)})
    for tenant in ("a", "b"):
        await enqueue(engine, tenant, "f", per_tenant)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=30)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"{t}-{i}" for t in ("a", "b") for i in range(per_tenant)})
    ts = stamps(lines)
    check_envelope(ts, rate, burst, windows=(0.1, 0.5, 1.0, 2.0))
    ideal_s = (2 * per_tenant - burst) / rate  # 2.9 s
    assert ideal_s * 0.95 <= ts[-1] - ts[0] <= ideal_s * 1.3
    # Round-robin: by the time half the run is sent, each tenant has had a fair share of it.
    half = ts[len(ts) // 2]
    for tenant in ("a", "b"):
        assert len([t for t in stamps(lines, tenant) if t <= half]) >= 0.4 * len(ts) / 2


async def test_a_pair_limit_holds_for_its_pair_only(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    rate, burst, n = 100.0, 10.0, 200
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=16)
    for tenant in ("slow", "free"):
        await engine.add_tenant(tenant)
    await engine.add_provider("f", "file", options={"path": str(out)})
    await engine.set_pair_limit("slow", "f", Limit(rate, burst))
    for tenant in ("slow", "free"):
        await enqueue(engine, tenant, "f", n)
    await engine.start()
    assert await engine.run_until_empty(timeout_s=30)

    lines = read_lines(out)
    assert_each_key_once(lines, {f"{t}-{i}" for t in ("slow", "free") for i in range(n)})
    slow, free = stamps(lines, "slow"), stamps(lines, "free")
    check_envelope(slow, rate, burst, windows=(0.1, 0.5, 1.0))
    ideal_s = (n - burst) / rate  # 1.9 s
    assert ideal_s * 0.95 <= slow[-1] - slow[0] <= ideal_s * 1.3
    assert free[-1] - free[0] < ideal_s / 2  # the other tenant on that provider is not held
