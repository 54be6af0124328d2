"""Group commit of the API's enqueues (``api.coalesce``), on both stores: requests that arrive
together share transactions yet each gets its own answer, in its own order; a key two requests
use is new for the first and a duplicate for the second; a request the engine refuses fails
alone, and nothing is written twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.coalesce import Coalescer
from engine import ConfigError, EnqueueItem
from testkit.stores import EngineFactory


async def test_requests_that_arrive_together_share_transactions(
    make_engine: EngineFactory,
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.tenant_add("beta")
    await engine.provider_add("sim", "simulated")
    coalescer = Coalescer(engine)

    def rows(n: int, tenant: str) -> list[EnqueueItem]:
        return [
            EnqueueItem("sim", f"{tenant}{n}-{i}@x.y", {}, f"{tenant}-{n}-{i}", 0) for i in range(3)
        ]

    asks = [(("acme", "beta")[n % 2], n) for n in range(40)]
    answers = await asyncio.gather(*(coalescer.enqueue(t, rows(n, t)) for t, n in asks))
    assert coalescer.rounds < 40  # shared: fewer transactions than requests
    for (tenant, n), results in zip(asks, answers, strict=True):
        assert [r.idempotency_key for r in results] == [f"{tenant}-{n}-{i}" for i in range(3)]
        assert not any(r.duplicate for r in results)
    ids = [r.id for results in answers for r in results]
    assert len(set(ids)) == 120
    acme = await engine.notifications("acme", limit=1000)
    assert len(acme) == 60


async def test_a_shared_key_and_a_refused_request(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    coalescer = Coalescer(engine)
    first, second, bad, after = await asyncio.gather(
        coalescer.enqueue("acme", [EnqueueItem("sim", "a@x.y", {}, "same", 0)]),
        coalescer.enqueue("acme", [EnqueueItem("sim", "b@x.y", {}, "same", 0)]),
        coalescer.enqueue("acme", [EnqueueItem("sim", "", {}, "empty", 0)]),  # no recipient
        coalescer.enqueue("acme", [EnqueueItem("sim", "c@x.y", {}, "other", 0)]),
        return_exceptions=True,
    )
    assert not isinstance(first, BaseException) and not isinstance(second, BaseException)
    assert first[0].duplicate is False and second[0].duplicate is True
    assert first[0].id == second[0].id
    assert isinstance(bad, ConfigError)
    assert not isinstance(after, BaseException) and after[0].duplicate is False
    assert len(await engine.notifications("acme", limit=100)) == 2


async def test_several_writers_at_once(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    coalescer = Coalescer(engine, writers=4, max_rows=5)
    answers = await asyncio.gather(
        *(
            coalescer.enqueue("acme", [EnqueueItem("sim", f"u{n}@x.y", {}, f"k{n}", 0)] * 2)
            for n in range(30)
        )
    )
    for n, results in enumerate(answers):
        assert [r.duplicate for r in results] == [False, True]  # the same key twice in one request
        assert results[0].idempotency_key == f"k{n}"
    assert len(await engine.notifications("acme", limit=100)) == 30


async def test_a_backlog_goes_to_several_writers_in_rounds_of_a_few_rows(
    make_engine: EngineFactory,
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    rounds: list[int] = []
    under_way = most = 0
    real = engine.enqueue_many

    async def watched(tenant: str, rows: Any) -> Any:
        nonlocal under_way, most
        rounds.append(len(rows))
        under_way += 1
        most = max(most, under_way)
        try:
            await asyncio.sleep(0.01)  # the store at work: other writers start meanwhile
            return await real(tenant, rows)
        finally:
            under_way -= 1

    engine.enqueue_many = watched  # type: ignore[method-assign,assignment]
    coalescer = Coalescer(engine, writers=3, round_rows=6)
    answers = await asyncio.gather(
        *(
            coalescer.enqueue("acme", [EnqueueItem("sim", f"u{n}@x.y", {}, f"k{n}", 0)] * 2)
            for n in range(30)
        )
    )
    assert [len(a) for a in answers] == [2] * 30
    assert sum(rounds) == 60 and max(rounds) <= 6  # three requests of two rows at most
    assert most == 3  # every writer at work at once
    assert len(await engine.notifications("acme", limit=100)) == 30


@pytest.mark.parametrize("writers", [1, 3])
async def test_no_request_waits_for_good_when_its_writer_is_cancelled(
    make_engine: EngineFactory, writers: int
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    coalescer = Coalescer(engine, writers=writers)
    pending = [
        asyncio.ensure_future(
            coalescer.enqueue("acme", [EnqueueItem("sim", f"u{n}@x.y", {}, None, 0)])
        )
        for n in range(10)
    ]
    await asyncio.sleep(0)
    for task in list(coalescer._writing):
        task.cancel()
    done = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 10)
    assert all(isinstance(d, (list, Exception)) for d in done)
