"""``omnipost retention show|set`` and ``omnipost prune``, on SQLite and on Postgres.

History is made through the CLI (enqueue, then a worker on simulated providers) and then aged
by moving ``finished_at`` and ``ts`` into the past with SQL, as months of operation would.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from app.paths import Paths, load_box
from engine import BUILTIN_KINDS, Engine, EngineSettings, LocalLimiter, Store, SystemClock
from testkit.cli import Cli, assert_one_sentence, clean_env, run_process, sql

DAY_S = 86400.0
DEFAULTS = {
    "delivered": {"seconds": 7 * DAY_S, "text": "7d"},
    "dead": {"seconds": 30 * DAY_S, "text": "30d"},
    "log": {"seconds": 7 * DAY_S, "text": "7d"},
    "audit": {"seconds": 90 * DAY_S, "text": "90d"},
    "suppressions": {"seconds": 365 * DAY_S, "text": "365d"},
}
SQLITE_ONLY = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


def enqueue(cli: Cli, provider: str, key: str) -> tuple[str, int]:
    """``enqueue acme PROVIDER ... --key KEY``: ("queued" or "already queued", id)."""
    out = cli.ok("enqueue", "acme", provider, f"{key}@example.com", "--key", key)
    match = re.fullmatch(rf"(queued|already queued) as (\d+) \(key {re.escape(key)}\)\n", out)
    assert match, out
    return match.group(1), int(match.group(2))


def age(url: str, keys: list[str], days: float) -> None:
    """Make the notifications of ``keys``, and their delivery-log rows, ``days`` old."""
    when = time.time() - days * DAY_S
    for key in keys:
        [(n,)] = sql(url, "SELECT id FROM notifications WHERE idempotency_key = :k", k=key)
        sql(url, "UPDATE notifications SET finished_at = :t WHERE id = :n", t=when, n=n)
        sql(url, "UPDATE delivery_log SET ts = :t WHERE notification_id = :n", t=when, n=n)


def keys_kept(url: str) -> set[str]:
    return {key for (key,) in sql(url, "SELECT idempotency_key FROM notifications")}


def count(url: str, table: str) -> int:
    [(n,)] = sql(url, f"SELECT count(*) FROM {table}")
    return int(n)


# -- show and set ------------------------------------------------------------------------------


def test_show_the_defaults(cli: Cli) -> None:
    shown = cli.json("retention", "show")
    assert shown["retention"] == DEFAULTS
    assert shown["last_pruned_at"] is None
    assert shown["size"]["notifications"] == 0
    assert shown["size"]["used_bytes"] > 0
    assert (shown["size"]["free_bytes"] is None) == shown["store"].startswith("postgresql")
    text = cli.ok("retention", "show").splitlines()
    assert text[1].split() == ["WINDOW", "KEPT", "FOR", "WHAT"]
    assert [row.split()[:2] for row in text[2:7]] == [
        ["delivered", "7d"],
        ["dead", "30d"],
        ["log", "7d"],
        ["audit", "90d"],
        ["suppressions", "365d"],
    ]
    assert re.fullmatch(r"size: \d+(\.\d)? [KMG]?i?B.*, 0 notifications kept", text[7]), text[7]
    assert text[8] == "last prune: never"


@pytest.mark.parametrize(
    ("given", "seconds", "text"),
    [
        ("12h", 12 * 3600.0, "12h"),
        ("1d12h", 36 * 3600.0, "36h"),
        ("2w", 14 * DAY_S, "14d"),
        ("90m", 5400.0, "90m"),
        ("3600s", 3600.0, "1h"),
        ("0", None, "forever"),
    ],
)
@SQLITE_ONLY
def test_set_reads_ages_and_shows_them_back(
    cli: Cli, given: str, seconds: float | None, text: str
) -> None:
    out = cli.ok("retention", "set", "--dead", given)
    assert out == f"retention: delivered 7d, dead {text}, log 7d, audit 90d, suppressions 365d\n"
    assert cli.json("retention", "show")["retention"]["dead"] == {"seconds": seconds, "text": text}


def test_set_survives_a_restart_and_other_processes_see_it(cli: Cli, tmp_path: Path) -> None:
    out = cli.ok("retention", "set", "--delivered", "12h", "--dead", "0")
    assert out == "retention: delivered 12h, dead forever, log 7d, audit 90d, suppressions 365d\n"
    out = cli.ok("retention", "set", "--audit", "52w")  # keeps the earlier changes
    assert out == "retention: delivered 12h, dead forever, log 7d, audit 364d, suppressions 365d\n"
    assert cli.db_url is not None
    fresh = run_process(["retention", "show", "--json", "--db", cli.db_url], clean_env(tmp_path))
    assert fresh.code == 0, fresh.err
    shown = json.loads(fresh.out)
    assert cli.json("retention", "show")["retention"] == shown["retention"]
    assert shown["retention"]["delivered"] == {"seconds": 12 * 3600.0, "text": "12h"}
    assert shown["retention"]["dead"] == {"seconds": None, "text": "forever"}
    assert shown["retention"]["audit"] == {"seconds": 364 * DAY_S, "text": "364d"}
    assert shown["retention"]["log"] == DEFAULTS["log"]
    assert cli.json("stats")["retention"] == shown["retention"]
    shown_line = "retention: delivered 12h, dead forever, log 7d, audit 364d, suppressions 365d\n"
    assert shown_line in cli.ok("stats")
    audited = sql(cli.db_url, "SELECT detail FROM audit_log WHERE action = 'retention.set'")
    assert len(audited) == 2
    assert '"delivered_s": 43200.0' in audited[-1][0]


BAD_AGES = ["-1d", "7 parsecs", "nan", "", "1e5s", "inf", "7", "d", "1d 7 parsecs", "x" * 10_000]


@pytest.mark.slow
@SQLITE_ONLY
@pytest.mark.parametrize("window", ["delivered", "dead", "log", "audit"])
@pytest.mark.parametrize("bad", BAD_AGES, ids=lambda bad: repr(bad)[:20])
def test_a_bad_age_is_one_sentence_and_changes_nothing(cli: Cli, window: str, bad: str) -> None:
    before = cli.json("retention", "show")["retention"]
    audited = count(str(cli.db_url), "audit_log")
    result = cli("retention", "set", "--delivered", "1d", f"--{window}={bad}")
    assert result.code == 2, result
    assert_one_sentence(result.err)
    assert f"--{window}" in result.err and "is not valid" in result.err, result.err
    assert result.out == ""
    assert cli.json("retention", "show")["retention"] == before
    assert count(str(cli.db_url), "audit_log") == audited


@pytest.mark.slow
@SQLITE_ONLY
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["retention", "set"], "nothing to change"),
        (["retention", "set", "--delivered", "-1d"], "expected one argument"),
        (["retention", "set", "--dead"], "expected one argument"),
        (["retention", "set", "--forever", "1d"], "unrecognized arguments"),
        (["retention"], "argument ACTION"),
        (["retention", "drop"], "invalid choice"),
        (["prune", "--dry-run", "now"], "unrecognized arguments"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_retention_usage_errors(cli: Cli, argv: list[str], says: str) -> None:
    before = cli.json("retention", "show")["retention"]
    result = cli(*argv)
    assert result.code == 2, result
    assert_one_sentence(result.err)
    assert says in result.err, result.err
    assert cli.json("retention", "show")["retention"] == before


# -- prune -------------------------------------------------------------------------------------


def make_history(cli: Cli) -> None:
    """Delivered notifications d1..d4 and dead letters x1..x3, then queued q1 and q2."""
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=1")
    cli.ok(
        "provider", "add", "bad", "--kind", "simulated",
        "--option", "latency_ms=1", "--option", "permanent_rate=1",
    )  # fmt: skip
    for n in range(1, 5):
        enqueue(cli, "sim", f"d{n}")
    for n in range(1, 4):
        enqueue(cli, "bad", f"x{n}")
    cli.ok("worker", "--until-empty", "--quiet")
    enqueue(cli, "sim", "q1")
    enqueue(cli, "sim", "q2")


@pytest.mark.slow
def test_prune_dry_run_then_for_real(cli: Cli) -> None:
    url = str(cli.db_url)
    make_history(cli)
    age(url, ["d1", "d2"], days=8)  # past the 7 days of delivered notifications and their log
    age(url, ["d3"], days=6)
    age(url, ["x1"], days=31)  # dead letters are kept 30 days from when they died
    age(url, ["x2"], days=8)
    # Queued notifications stay whatever their age.
    sql(url, "UPDATE notifications SET enqueued_at = 0, available_at = 0 WHERE state = 'queued'")
    old_audit = sql(url, "SELECT id FROM audit_log ORDER BY id")[:2]
    for (n,) in old_audit:
        sql(url, "UPDATE audit_log SET ts = :t WHERE id = :n", t=time.time() - 91 * DAY_S, n=n)
    [(old_log,)] = sql(url, "SELECT count(*) FROM delivery_log WHERE ts < :t",
                       t=time.time() - 7 * DAY_S)  # fmt: skip
    assert old_log >= 4  # d1, d2, x1, x2: one attempt each at least
    tables = ("notifications", "delivery_log", "audit_log")
    before = {t: count(url, t) for t in tables}
    expected = {
        "delivered": 2,
        "dead": 1,
        "cancelled": 0,
        "delivery_log": old_log,
        "audit_log": 2,
        "api_requests": 0,
        "suppressed": 0,
        "suppressions": 0,
        "expired": 0,
        "status_events": 0,
    }

    assert cli.json("prune", "--dry-run") == {**expected, "freed_bytes": 0, "dry_run": True}
    assert {t: count(url, t) for t in tables} == before
    assert cli.json("retention", "show")["last_pruned_at"] is None
    text = cli.ok("prune", "--dry-run").splitlines()
    assert text[1].split() == ["ROWS", "WOULD", "DELETE"]
    assert text[2].split() == ["delivered", "notifications", "2"]
    assert not any("given back" in line for line in text)

    done = cli.json("prune")
    assert {k: v for k, v in done.items() if k != "freed_bytes"} == {**expected, "dry_run": False}
    assert isinstance(done["freed_bytes"], int) and done["freed_bytes"] >= 0
    assert keys_kept(url) == {"d3", "d4", "x2", "x3", "q1", "q2"}
    assert {t: before[t] - count(url, t) for t in tables} == {
        "notifications": 3,
        "delivery_log": old_log,
        "audit_log": 2,
    }
    shown = cli.json("retention", "show")
    assert shown["size"]["notifications"] == 6
    assert time.time() - 60 < shown["last_pruned_at"] <= time.time()
    assert {d["tenant"]: (d["queued"], d["delivered"], d["dead"]) for d in
            cli.json("stats")["depth"]} == {"acme": (2, 2, 2)}  # fmt: skip

    again = cli.json("prune")
    assert again == {
        "delivered": 0, "dead": 0, "cancelled": 0, "delivery_log": 0, "audit_log": 0,
        "api_requests": 0, "suppressed": 0, "suppressions": 0, "expired": 0,
        "status_events": 0,
        "freed_bytes": 0, "dry_run": False,
    }  # fmt: skip
    text = cli.ok("prune").splitlines()
    assert text[1].split() == ["ROWS", "DELETED"]
    assert not any("given back" in line for line in text)  # said only when pages were freed


@pytest.mark.slow
def test_forever_keeps_everything(cli: Cli) -> None:
    url = str(cli.db_url)
    make_history(cli)
    age(url, ["d1", "x1"], days=400)
    cli.ok("retention", "set", "--delivered", "0", "--dead", "0", "--log", "0", "--audit", "0")
    assert cli.json("prune") == {
        "delivered": 0, "dead": 0, "cancelled": 0, "delivery_log": 0, "audit_log": 0,
        "api_requests": 0, "suppressed": 0, "suppressions": 0, "expired": 0,
        "status_events": 0,
        "freed_bytes": 0, "dry_run": False,
    }  # fmt: skip
    cli.ok("retention", "set", "--dead", "1w")  # now only the old dead letter goes
    assert cli.json("prune", "--dry-run")["dead"] == 1
    assert cli.json("prune")["dead"] == 1
    assert "x1" not in keys_kept(url)
    assert "d1" in keys_kept(url)


@pytest.mark.slow
def test_a_pruned_notifications_key_can_be_used_again(cli: Cli) -> None:
    url = str(cli.db_url)
    make_history(cli)
    word, first = enqueue(cli, "sim", "d1")
    assert word == "already queued"
    age(url, ["d1"], days=8)
    assert cli.json("prune")["delivered"] == 1
    word, second = enqueue(cli, "sim", "d1")
    assert word == "queued"
    assert second != first
    assert enqueue(cli, "sim", "d1") == ("already queued", second)


def test_a_pruned_notifications_id_is_not_given_again(cli: Cli) -> None:
    """The newest notification pruned: its id must not come back, or its delivery-log rows
    (kept by their own window) and any operator's note of the id would name another one."""
    url = str(cli.db_url)
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated", "--option", "latency_ms=1")
    _, first = enqueue(cli, "sim", "k")
    cli.ok("worker", "--until-empty", "--quiet")
    assert enqueue(cli, "sim", "k") == ("already queued", first)
    age(url, ["k"], days=8)
    cli.ok("retention", "set", "--log", "30d")
    assert cli.json("prune")["delivered"] == 1
    word, second = enqueue(cli, "sim", "k")
    assert word == "queued"
    assert second != first, "the id of a pruned notification was given to a new one"


def test_show_says_when_the_background_prune_ran(cli: Cli) -> None:
    """An engine started with a short ``prune_s`` runs the chore; ``show`` reports when."""
    url = str(cli.db_url)
    make_history(cli)
    age(url, ["d1"], days=8)
    started = time.time()
    pruned_at = asyncio.run(_background_prune(url))
    assert started <= pruned_at <= time.time()
    shown = cli.json("retention", "show")
    assert shown["last_pruned_at"] == pytest.approx(pruned_at)
    assert "d1" not in keys_kept(url)
    line = cli.ok("retention", "show").splitlines()[-1]
    assert re.fullmatch(r"last prune: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d", line)


async def _background_prune(url: str) -> float:
    settings = EngineSettings(prune_s=0.05)
    async with (
        Store(url, load_box(Paths.from_env())) as store,
        Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings) as engine,
    ):
        await engine.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pruned_at = await engine.pruned_at()
            if pruned_at is not None:
                return pruned_at
            await asyncio.sleep(0.05)
    raise AssertionError("no background prune within 20 s")
