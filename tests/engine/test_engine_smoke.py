from __future__ import annotations

import json
from pathlib import Path

from engine import Limit
from testkit.stores import EngineFactory


async def test_engine_drains_through_file_provider(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    engine = await make_engine(concurrency=8)
    await engine.tenant_add("acme", Limit(1000, 50))
    await engine.provider_add("f", "file", options={"path": str(out)})
    for i in range(30):
        await engine.enqueue("acme", "f", f"user{i}@example.com", {"i": i}, key=f"k{i}")
    await engine.start()
    assert await engine.run_until_empty(timeout_s=30)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["idempotency_key"] for line in lines) == sorted(f"k{i}" for i in range(30))
