"""The happy path of every ``omnipost`` command, in-process, on SQLite and on Postgres."""

from __future__ import annotations

import io
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from testkit.cli import Cli, assert_one_sentence

SECRETS = ("s3cret-signing-key", "Bearer t0ken-for-the-hook", "n3w-signing-key")


def enqueued_id(out: str, key: str, *, duplicate: bool = False) -> int:
    word = "already queued as" if duplicate else "queued as"
    match = re.fullmatch(rf"{word} (\d+) \(key {re.escape(key)}\)\n", out)
    assert match, out
    return int(match.group(1))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def closed(provider: str) -> dict[str, Any]:
    """A provider's ``health`` in JSON while its circuit has never opened."""
    return {
        "provider": provider,
        "state": "closed",
        "since": None,
        "last_error": "",
        "next_probe_at": None,
        "failures": 0,
    }


def depth(cli: Cli) -> dict[str, dict[str, Any]]:
    return {d["tenant"]: d for d in cli.json("stats")["depth"]}


def test_migrate_twice_reports_the_same_revision(cli: Cli) -> None:
    first = cli.ok("migrate")
    second = cli.ok("migrate")
    assert "is at revision" in first
    assert first == second


def test_tenant_add_set_list(cli: Cli) -> None:
    assert cli.ok("tenant", "add", "acme", "--rate", "10", "--burst", "5") == (
        "tenant acme added: 10/s burst 5\n"
    )
    cli.ok("tenant", "add", "globex", "--rate", "120/min", "--disable")
    cli.ok("tenant", "add", "initech")
    assert cli.ok("tenant", "set", "acme", "--rate", "3600/h") == (
        "tenant acme: 1/s burst 1, enabled\n"
    )
    cli.ok("tenant", "set", "globex", "--rate", "7", "--burst", "14", "--enable")
    cli.ok("tenant", "set", "initech", "--rate", "1", "--disable")
    cli.ok("tenant", "set", "initech", "--unlimited", "--disable")
    assert cli.ok("tenant", "set", "globex", "--api-rate", "5/s", "--max-queued", "1000") == (
        "tenant globex: 7/s burst 14, enabled; API requests per key 5/s burst 10, queue cap 1,000\n"
    )
    api = {"api_limit": None, "max_queued": None, "default_ttl_s": None}
    assert cli.json("tenant", "list") == [
        {"name": "acme", "limit": {"rate_per_s": 1.0, "burst": 1.0}, "enabled": True, **api},
        {
            "name": "globex",
            "limit": {"rate_per_s": 7.0, "burst": 14.0},
            "enabled": True,
            "api_limit": {"rate_per_s": 5.0, "burst": 10.0},
            "max_queued": 1000,
            "default_ttl_s": None,
        },
        {"name": "initech", "limit": None, "enabled": False, **api},
    ]
    cli.ok("tenant", "set", "globex", "--api-rate", "default", "--max-queued", "default")
    assert cli.json("tenant", "list")[1] == {
        "name": "globex",
        "limit": {"rate_per_s": 7.0, "burst": 14.0},
        "enabled": True,
        **api,
    }
    for bad in (["--api-burst", "3"], ["--max-queued", "0"], ["--max-queued", "lots"]):
        assert cli("tenant", "set", "globex", *bad).code == 2
    table = cli.ok("tenant", "list").splitlines()
    assert table[0].split() == ["TENANT", "LIMIT", "ENABLED"]
    assert [row.split()[0] for row in table[1:]] == ["acme", "globex", "initech"]


def test_set_without_a_limit_keeps_the_limit(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "10", "--burst", "5")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--rate", "20")
    assert cli.ok("tenant", "set", "acme", "--disable") == "tenant acme: 10/s burst 5, disabled\n"
    cli.ok("provider", "set", "sim", "--option", "latency_ms=1")
    [sim] = cli.json("provider", "list")
    assert sim["limit"] == {"rate_per_s": 20.0, "burst": 20.0}
    assert sim["options"] == {"latency_ms": "1"}


def test_provider_add_set_list_masks_every_secret(cli: Cli, tmp_path: Path) -> None:
    signing, bearer, new_signing = SECRETS
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=2")
    out = tmp_path / "out.jsonl"
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={out}", "--rate", "50")
    cli.ok(
        "provider", "add", "hook", "--kind", "webhook",
        "--option", "url=http://127.0.0.1:9/hook",
        "--secret", f"signing_key={signing}",
        "--secret", f"header.Authorization={bearer}",
    )  # fmt: skip
    assert cli.ok(
        "provider", "set", "hook", "--secret", f"signing_key={new_signing}", "--rate", "5"
    ) == ("provider hook (webhook): 5/s burst 5\n")
    cli.ok("provider", "set", "sim", "--rate", "100", "--burst", "10", "--option", "seed=7")
    assert cli.json("provider", "list") == [
        {
            "name": "audit",
            "kind": "file",
            "limit": {"rate_per_s": 50.0, "burst": 50.0},
            "options": {"path": str(out)},
            "secrets": {},
            "health": closed("audit"),
        },
        {
            "name": "hook",
            "kind": "webhook",
            "limit": {"rate_per_s": 5.0, "burst": 5.0},
            "options": {"url": "http://127.0.0.1:9/hook"},
            "secrets": {"header.Authorization": "********", "signing_key": "********"},
            "health": closed("hook"),
        },
        {
            "name": "sim",
            "kind": "simulated",
            "limit": {"rate_per_s": 100.0, "burst": 10.0},
            "options": {"latency_ms": "2", "seed": "7"},
            "secrets": {},
            "health": closed("sim"),
        },
    ]
    table = cli.ok("provider", "list")
    assert "header.Authorization=******** signing_key=********" in table
    cli.ok("stats")
    cli.json("stats")
    everything = "".join(cli.transcript)
    for secret in SECRETS:
        assert secret not in everything
        assert secret.split()[-1] not in everything


def test_limit_set_list_clear(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    cli.ok("provider", "add", "sms", "--kind", "simulated")
    assert cli.ok("limit", "set", "acme", "sim", "--rate", "5", "--burst", "2") == (
        "limit of acme on sim: 5/s burst 2\n"
    )
    cli.ok("limit", "set", "acme", "sms", "--rate", "60/min", "--burst", "3")
    cli.ok("limit", "set", "acme", "sim", "--rate", "6", "--burst", "4")
    assert cli.json("limit", "list") == [
        {"tenant": "acme", "provider": "sim", "limit": {"rate_per_s": 6.0, "burst": 4.0}},
        {"tenant": "acme", "provider": "sms", "limit": {"rate_per_s": 1.0, "burst": 3.0}},
    ]
    assert "acme    sim       6/s burst 4" in cli.ok("limit", "list")
    cli.ok("limit", "set", "acme", "sim", "--clear")
    assert [p["provider"] for p in cli.json("limit", "list")] == ["sms"]


def test_enqueue_one_and_a_duplicate_key(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    args = ("enqueue", "acme", "sim", "bob@example.com", "--payload", '{"text": "hi"}')
    first = enqueued_id(cli.ok(*args, "--key", "k1", "--priority", "3"), "k1")
    again = enqueued_id(cli.ok(*args, "--key", "k1"), "k1", duplicate=True)
    assert again == first
    other = cli.ok(*args)  # no key: one is made up
    assert re.fullmatch(r"queued as \d+ \(key [0-9a-f]{32}\)\n", other), other
    assert depth(cli)["acme"]["queued"] == 2


def test_enqueue_file_and_stdin(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for tenant in ("acme", "globex"):
        cli.ok("tenant", "add", tenant)
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    lines = [
        {"tenant": "acme", "provider": "sim", "recipient": "a@example.com", "key": "a1"},
        {"tenant": "globex", "provider": "sim", "recipient": "+15550001", "payload": {"n": 2}},
        {"tenant": "acme", "provider": "sim", "recipient": "c@example.com", "priority": -1},
    ]
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    assert cli.ok("enqueue", "--file", str(path)) == "queued 3, already queued 0\n"
    # Lines without a key get one from their content, so a second run adds nothing.
    assert cli.ok("enqueue", "--file", str(path)) == "queued 0, already queued 3\n"

    stdin = [
        {"tenant": "globex", "provider": "sim", "recipient": "d@example.com", "key": "d1"},
        {"tenant": "acme", "provider": "sim", "recipient": "a@example.com", "key": "a1"},
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(x) + "\n" for x in stdin)))
    assert cli.ok("enqueue", "--file", "-") == "queued 1, already queued 1\n"
    assert {t: d["queued"] for t, d in depth(cli).items()} == {"acme": 2, "globex": 2}


def test_enqueue_file_with_one_bad_line_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    for tenant in ("acme", "globex"):
        cli.ok("tenant", "add", tenant)
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    good = [
        {"tenant": tenant, "provider": "sim", "recipient": f"r{n}@example.com", "key": f"k{n}"}
        for n, tenant in enumerate(["acme", "globex"] * 5)
    ]
    bad = {"tenant": "globex", "provider": "sim", "recipient": "x@example.com", "key": "k" * 201}
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [*good, bad]) + "\n", encoding="utf-8")
    result = cli("enqueue", "--file", str(path))
    assert result.code == 2
    assert "line 11" in result.err
    assert depth(cli) == {}


def test_worker_delivers_each_notification_once_through_a_file_provider(
    cli: Cli, tmp_path: Path
) -> None:
    for tenant in ("acme", "globex"):
        cli.ok("tenant", "add", tenant, "--rate", "1000", "--burst", "50")
    out = tmp_path / "delivered.jsonl"
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={out}")
    keys = [f"key-{n}" for n in range(40)]
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "".join(
            json.dumps(
                {
                    "tenant": "acme" if n % 2 else "globex",
                    "provider": "audit",
                    "recipient": f"user{n}@example.com",
                    "payload": {"n": n},
                    "key": key,
                }
            )
            + "\n"
            for n, key in enumerate(keys)
        ),
        encoding="utf-8",
    )
    cli.ok("enqueue", "--file", str(batch))
    run = cli("worker", "--until-empty", "--concurrency", "4", "--lease-s", "10", "--prefetch", "0")
    assert run.code == 0, run.err
    assert "delivered 40 " in run.out
    # Its last word on its own work: loop stalls, claims, pairs that found nothing (one worker:
    # none), tokens taken again for sends that started late, the limiter it ended on.
    work = re.search(
        r"longest loop stall \d+ ms; (\d+) claims, (\d+) pairs found nothing to lease; "
        r"(\d+) stale tokens taken again",
        run.err,
    )
    assert work is not None, run.err
    assert int(work.group(1)) >= 1 and int(work.group(2)) == 0 and int(work.group(3)) <= 40
    assert "limiter local" in run.err
    lines = read_jsonl(out)
    assert Counter(line["idempotency_key"] for line in lines) == Counter(keys)
    for line in lines:
        n = line["payload"]["n"]
        assert line["tenant"] == ("acme" if n % 2 else "globex")
        assert line["recipient"] == f"user{n}@example.com"
        assert line["attempt"] == 1
    assert {t: (d["queued"], d["delivered"]) for t, d in depth(cli).items()} == {
        "acme": (0, 20),
        "globex": (0, 20),
    }
    # Nothing left: a second worker exits at once.
    assert "delivered 0 " in cli.ok("worker", "--until-empty", "--quiet")


@pytest.mark.slow
def test_simulate_a_steady_burst(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("tenant", "add", "globex")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=1")
    out = cli.ok(
        "simulate", "acme,globex", "sim", "--count", "5", "--pattern", "steady", "--duration", "1"
    )
    assert "delivered 10 " in out
    assert {t: d["delivered"] for t, d in depth(cli).items()} == {"acme": 5, "globex": 5}


def test_stats_text_and_json(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "4", "--burst", "2")
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    cli.ok("enqueue", "acme", "sim", "+15551234567", "--key", "s1")
    stats = cli.json("stats")
    assert stats["depth"] == [
        {
            "tenant": "acme",
            "queued": 1,
            "leased": 0,
            "delivered": 0,
            "dead": 0,
            "cancelled": 0,
            "oldest_queued_age_s": stats["depth"][0]["oldest_queued_age_s"],
            "suppressed": 0,
            "scheduled": 0,
            "expired": 0,
        }
    ]
    assert stats["depth"][0]["oldest_queued_age_s"] >= 0
    assert stats["limits"] == {
        "tenant:acme": {"rate_per_s": 4.0, "burst": 2.0},
        "provider:sim": None,
    }
    assert set(stats["last_60s"]) == {
        "delivered",
        "throttled",
        "transient",
        "permanent",
        "unavailable",
        "expired",
    }
    assert stats["health"] == [closed("sim")]
    assert stats["workers"] == []
    text = cli.ok("stats")
    assert re.search(r"^sim +closed +0 +-$", text, re.MULTILINE), text
    header = (
        "TENANT  QUEUED  SCHEDULED  IN FLIGHT  DELIVERED  DEAD  CANCELLED  SUPPRESSED  EXPIRED"
        "  OLDEST QUEUED"
    )
    assert header in text
    assert "live workers: 0" in text
    assert "+15551234567" not in text


def make_dead(cli: Cli, count: int) -> list[int]:
    """``count`` dead notifications of acme through the always-failing provider ``sim``."""
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "permanent_rate=1")
    ids = [
        enqueued_id(cli.ok("enqueue", "acme", "sim", f"+1555000{n:04d}", "--key", f"d{n}"), f"d{n}")
        for n in range(count)
    ]
    cli.ok("worker", "--until-empty", "--quiet")
    return ids


@pytest.mark.slow
def test_dead_list_and_discard(cli: Cli) -> None:
    ids = make_dead(cli, 3)
    dead = cli.json("dead", "list")
    assert [d["id"] for d in dead] == ids
    assert {d["error"] for d in dead} == {"simulated permanent failure"}
    assert all(d["tenant"] == "acme" and d["provider"] == "sim" for d in dead)
    assert cli.json("dead", "list", "--tenant", "acme") == dead
    text = cli.ok("dead", "list")
    assert "simulated permanent failure" in text
    assert "+15550000000" not in "".join(cli.transcript)  # recipients are masked
    assert cli.ok("dead", "discard", str(ids[0])) == "1 dead notification discarded\n"
    assert [d["id"] for d in cli.json("dead", "list")] == ids[1:]
    assert cli.ok("dead", "discard", "--all", "--tenant", "acme") == (
        "2 dead notifications discarded\n"
    )
    assert cli.json("dead", "list") == []


@pytest.mark.slow
def test_dead_retry_after_fixing_the_provider(cli: Cli) -> None:
    ids = make_dead(cli, 4)
    cli.ok("provider", "set", "sim", "--option", "permanent_rate=0")
    assert cli.ok("dead", "retry", *map(str, ids[:3])) == "3 dead notifications queued again\n"
    assert "delivered 3 " in cli.ok("worker", "--until-empty", "--quiet")
    assert [d["id"] for d in cli.json("dead", "list")] == ids[3:]
    assert cli.ok("dead", "retry", "--all") == "1 dead notification queued again\n"
    cli.ok("worker", "--until-empty", "--quiet")
    assert cli.json("dead", "list") == []
    assert depth(cli)["acme"]["delivered"] == 4


def test_provider_test_sends_one_message(cli: Cli, tmp_path: Path) -> None:
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=1")
    out = tmp_path / "test.jsonl"
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={out}")
    assert cli.ok("provider", "test", "sim", "bob@example.com") == (
        "test send to b***@e***.com via sim: delivered (simulated)\n"
    )
    assert cli.ok("provider", "test", "audit", "bob@example.com") == (
        "test send to b***@e***.com via audit: delivered\n"
    )
    [line] = read_jsonl(out)
    assert line["recipient"] == "bob@example.com"
    assert line["provider"] == "audit"
    assert line["idempotency_key"].startswith("test-")
    assert depth(cli) == {}  # a test send is not queued


def test_stats_at_many_tenants_lists_the_deepest_and_the_totals(cli: Cli, tmp_path: Path) -> None:
    """Past 20 tenants, stats lists the 20 with the most queued (read inside the database, as
    a console's snapshot reads them) and the totals over every tenant; --all lists them all,
    --tenant only the named."""
    names = [f"t{i:02d}" for i in range(25)]
    tenants = tmp_path / "tenants.jsonl"
    tenants.write_text("".join(json.dumps({"name": n}) + "\n" for n in names), encoding="utf-8")
    cli.ok("tenant", "import", str(tenants))
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    batch = tmp_path / "batch.jsonl"
    items = [  # t00 has none queued, t01 one, ... t24 twenty-four
        {"tenant": n, "provider": "sim", "recipient": "+15550000000", "key": f"{n}-{j}"}
        for i, n in enumerate(names)
        for j in range(i)
    ]
    batch.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    cli.ok("enqueue", "--file", str(batch))

    stats = cli.json("stats")
    assert [d["tenant"] for d in stats["depth"]] == [f"t{i:02d}" for i in range(24, 4, -1)]
    assert [d["queued"] for d in stats["depth"]] == list(range(24, 4, -1))
    assert stats["queue"] == {
        "queued": sum(range(25)),
        "leased": 0,
        "delivered": 0,
        "dead": 0,
        "cancelled": 0,
        "suppressed": 0,
        "scheduled": 0,
        "expired": 0,
        "tenants_queued": 24,
    }
    assert stats["tenants"] == {"total": 25, "all_read": False}
    assert set(stats["limits"]) == {f"tenant:{d['tenant']}" for d in stats["depth"]} | {
        "provider:sim"
    }
    text = cli.ok("stats")
    assert (
        "all 25 tenants: queued 300, in flight 0, delivered 0, dead 0, cancelled 0,"
        " suppressed 0, scheduled 0, expired 0; 24 with queued work" in text
    )
    assert "listed: the 20 with the most queued (--all lists every tenant" in text
    assert re.search(r"^t05 +5 ", text, re.MULTILINE) and not re.search(r"^t04 ", text, re.M)

    every = cli.json("stats", "--all")
    assert {d["tenant"]: d["queued"] for d in every["depth"]} == {
        n: i for i, n in enumerate(names) if i
    }
    assert every["tenants"] == {"total": 25, "all_read": True}
    assert every["queue"] == stats["queue"]
    assert len(every["limits"]) == 26

    one = cli.json("stats", "--tenant", "t03", "--tenant", "t00")
    assert [d["tenant"] for d in one["depth"]] == ["t03"]  # t00 has nothing at all
    assert set(one["limits"]) == {"tenant:t00", "tenant:t03", "provider:sim"}
    assert "listed:" not in cli.ok("stats", "--tenant", "t03")

    missing = cli("stats", "--tenant", "nobody")
    assert missing.code == 2  # as every name that is not there
    assert "no tenant named 'nobody'" in missing.err
    assert_one_sentence(missing.err)
