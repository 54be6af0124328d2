"""Status events on the metrics endpoint and in ``omnipost stats`` (issue 48): per endpoint (by
tenant and id, never its URL) what waits and whether it is enabled, the outbox's writes, a
courier's deliveries and failed tries by answer; nothing while no endpoint exists."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from app.metrics import METRICS_VIEW, SnapshotCollector
from engine import Engine, Snapshot
from testkit.cli import Cli

from .test_metrics import labels, parse


def _scrape(snap: Snapshot) -> str:
    registry = CollectorRegistry()
    collector = SnapshotCollector()
    collector.update(snap)
    registry.register(collector)
    return generate_latest(registry).decode()


async def test_an_endpoints_outbox_is_on_the_metrics(make_engine: object) -> None:
    engine: Engine = await make_engine()  # type: ignore[operator]
    await engine.tenant_add("acme")
    await engine.provider_add("sim", "simulated")
    before = parse(_scrape(await engine.snapshot(view=METRICS_VIEW)))[0]
    assert not [name for name in before if "status_events" in name or "webhook" in name]

    hook = "https://hooks.example.com/omnipost?token=s3cret"
    made = await engine.webhook_add("acme", hook)
    later = engine.clock.wall() + 3600
    for n in range(3):
        await engine.enqueue("acme", "sim", f"u{n}@example.com", send_at=later)
    await engine.webhook_enable("acme", made.endpoint.id, False)
    await engine.enqueue("acme", "sim", "held@example.com", send_at=later)  # not written
    engine._events_read_at = float("-inf")  # read the outbox again now, not 5 s later
    text = _scrape(await engine.snapshot(view=METRICS_VIEW))
    types, samples = parse(text)
    one = labels(tenant="acme", endpoint=str(made.endpoint.id))
    assert types["omnipost_status_events_written"] == "counter"
    assert samples["omnipost_status_events_written_total", frozenset()] == 3
    assert samples["omnipost_status_events_held", one] == 3  # disabled: its events wait
    assert samples["omnipost_status_events_pending", one] == 0
    assert samples["omnipost_webhook_enabled", one] == 0
    assert "hooks.example.com" not in text and "s3cret" not in text


def test_stats_shows_each_endpoints_outbox(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    assert "status events" not in cli.ok("stats")
    made = cli.json("webhook", "add", "acme", "https://hooks.example.com/x")
    cli.ok("enqueue", "acme", "sim", "a@example.com", "--in", "1h")
    text = cli.ok("stats")
    assert "status events written: 1" in text
    [row] = [line for line in text.splitlines() if line.startswith("acme ") and "enabled" in line]
    assert row.split()[:5] == ["acme", str(made["id"]), "enabled", "1", "0"]
    found = cli.json("stats")["status_events"]
    assert found["written"] == 1
    assert found["endpoints"][0] | {"oldest_pending_age_s": None} == {
        "tenant": "acme",
        "id": made["id"],
        "enabled": True,
        "pending": 1,
        "held": 0,
        "given_up": 0,
        "oldest_pending_age_s": None,
    }
