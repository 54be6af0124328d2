"""``omnipost plan``: a burst, the backlog and a replay planned in virtual time, as JSON and as
text, with proposed limits; bad input refused with one sentence; and nothing real happening:
no provider called, no row written. On SQLite and on Postgres (the ``cli`` fixture)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from engine.store import normalize_url
from engine.store.schema import metadata
from testkit.cli import Cli, assert_one_sentence
from testkit.servers import MailServer, Reply, ThreadedServer

TENANT_KEYS = {"drain_s", "wait_p50_s", "wait_p95_s", "wait_p99_s", "max_queued", "paced_by"}
PLAN_KEYS = {"concurrency", "limits", "notifications", "total_drain_s", "tenants", "providers"}


@pytest.fixture
def configured(cli: Cli) -> Cli:
    """Tenants acme (10/s, burst 1) and globex (unlimited), and a simulated provider sms."""
    cli.ok("tenant", "add", "acme", "--rate", "10", "--burst", "1")
    cli.ok("tenant", "add", "globex")
    cli.ok("provider", "add", "sms", "--kind", "simulated")
    return cli


# -- traffic -----------------------------------------------------------------------------------


def test_a_burst_at_10_per_s_drains_in_4_9_s_and_twice_as_fast_at_20(configured: Cli) -> None:
    report = configured.json("plan", "acme", "sms", "--count", "50")
    assert set(report) == {"traffic", "changes", "current"}
    assert report["changes"] == []
    current = report["current"]
    assert set(current) >= PLAN_KEYS
    assert set(current["tenants"]) == {"acme"}
    acme = current["tenants"]["acme"]
    assert set(acme) >= TENANT_KEYS
    assert acme["notifications"] == 50
    assert acme["delivered"] == 50
    # One token at once, then one every 100 ms: the 50th goes out at 4.9 s (plus 5 ms to send).
    assert acme["drain_s"] == pytest.approx(4.9, abs=0.05)
    assert acme["paced_by"] == "tenant:acme"
    assert acme["wait_p50_s"] < acme["wait_p95_s"] <= acme["wait_p99_s"] <= acme["drain_s"]
    assert current["providers"]["sms"]["sends"] == 50
    assert current["providers"]["sms"]["model"]["source"] == "options"

    faster = configured.json("plan", "acme", "sms", "--count", "50", "--set", "tenant:acme=20")
    assert faster["changes"] == ["tenant:acme=20"]
    assert faster["current"]["tenants"] == current["tenants"]  # the same seed, the same plan
    proposed = faster["proposed"]["tenants"]["acme"]
    assert proposed["drain_s"] == pytest.approx(2.45, abs=0.05)
    assert proposed["drain_s"] < acme["drain_s"]
    assert faster["proposed"]["limits"]["tenant:acme"] == {"rate_per_s": 20.0, "burst": 1.0}


def test_a_proposed_concurrency_alone_is_a_proposal(configured: Cli) -> None:
    report = configured.json("plan", "acme,globex", "sms", "--count", "30", "--concurrency", "1")
    assert report["proposed"]["concurrency"] == 1
    assert set(report["proposed"]["tenants"]) == {"acme", "globex"}
    assert report["current"]["notifications"] == report["proposed"]["notifications"] == 60


def test_the_backlog_and_a_replay_plan_what_was_enqueued(configured: Cli) -> None:
    configured.ok("simulate", "acme,globex", "sms", "--count", "7", "--no-dispatch")
    configured.ok("enqueue", "globex", "sms", "bob@example.com")

    backlog = configured.json("plan", "--backlog")
    assert backlog["traffic"] == "the store's current backlog"
    assert backlog["current"]["notifications"] == 15
    tenants = backlog["current"]["tenants"]
    assert {name: t["notifications"] for name, t in tenants.items()} == {"acme": 7, "globex": 8}
    assert all(t["delivered"] == t["notifications"] for t in tenants.values())

    replay = configured.json("plan", "--replay", "1", "--speed", "2")
    assert replay["current"]["notifications"] == 15
    assert replay["current"]["tenants"]["acme"]["notifications"] == 7

    # Planning delivered nothing: the backlog is still there.
    assert configured.json("plan", "--backlog")["current"]["notifications"] == 15


def test_an_empty_backlog_plans_nothing(configured: Cli) -> None:
    report = configured.json("plan", "--backlog")
    assert report["current"]["tenants"] == {}
    assert report["current"]["total_drain_s"] == 0.0


def test_the_text_compares_current_and_proposed_side_by_side(configured: Cli) -> None:
    out = configured.ok("plan", "acme,globex", "sms", "--count", "50", "--set", "tenant:acme=20:1")
    lines = out.splitlines()
    assert lines[0] == "plan of a spike of 50 each for acme, globex through sms"
    assert "proposed: tenant:acme=20:1" in lines
    header = next(line for line in lines if line.startswith("TENANT"))
    assert header.split("|")[0].split() == [
        *("TENANT", "NOTIFICATIONS", "DRAIN", "WAIT", "P50/P95/P99"),
        *("MOST", "QUEUED", "PACED", "BY"),
    ]
    assert "PROPOSED DRAIN" in header
    acme = next(line for line in lines if line.startswith("acme "))
    assert "4.9s" in acme
    assert "tenant:acme" in acme
    assert re.search(r"\|\s+2\.\ds\s+-2\.\ds \(-50%\)", acme), acme
    globex = next(line for line in lines if line.startswith("globex "))
    assert "no change" in globex
    total = r"all 100 drained in 4\.9s now, in 2\.\ds as proposed: -2\.\ds \(-50%\)"
    assert any(re.fullmatch(total, line) for line in lines), out
    assert any(line.startswith("sms ") and "options" in line for line in lines)
    assert lines[-1].startswith("planned 4.9s of virtual time in ")
    assert lines[-1].endswith("; nothing was sent or written.")


def test_the_text_without_changes_has_no_proposed_columns(configured: Cli) -> None:
    out = configured.ok("plan", "acme", "sms", "--count", "5")
    assert "PROPOSED" not in out
    assert "|" not in out
    assert "acme" in out


# -- bad input ---------------------------------------------------------------------------------

BURST = ("acme", "sms", "--count", "5")


def case(*argv: str, says: str) -> Any:
    return pytest.param(list(argv), says, id=" ".join(argv)[:80] or "(nothing)")


BAD = [
    case(*BURST, "--set", "nobody=5", says="not a limit change"),
    case(*BURST, "--set", "tenant:acme=-1", says="above 0"),
    case(*BURST, "--set", "tenant:acme=5:0", says="burst"),
    case(*BURST, "--set", "tenant:nobody=5", says="no tenant named 'nobody'"),
    case(*BURST, "--set", "provider:nowhere=5", says="no provider named 'nowhere'"),
    case(*BURST, "--set", "pair:acme/nowhere=5", says="no provider named 'nowhere'"),
    case("--replay", "-3", says="above 0"),
    case("--replay", "0", says="above 0"),
    case("--replay", "nan", says="above 0"),
    case("--replay", "soon", says="a number"),
    case("--replay", "1", "--speed", "0", says="speed"),
    case("--backlog", "--speed", "2", says="--speed"),
    case("acme", "nowhere", "--count", "5", says="no provider named 'nowhere'"),
    case("nobody", "sms", "--count", "5", says="no tenant named 'nobody'"),
    case("acme,nobody", "sms", "--count", "5", says="no tenant named 'nobody'"),
    case(",", "sms", "--count", "5", says="at least one tenant"),
    case("acme", "sms", "--count", "0", says="at least 1"),
    case("acme", "sms", says="--count"),
    case("acme", "--count", "5", says="PROVIDER"),
    case(*BURST, "--pattern", "bogus", says="invalid choice"),
    case(*BURST, "--duration", "-1", says="duration"),
    case(*BURST, "--concurrency", "0", says="at least 1"),
    case(*BURST, "--backlog", says="one traffic"),
    case("--backlog", "--replay", "1", says="one traffic"),
    case("--backlog", "--count", "5", says="burst"),
    case(says="one traffic"),
    case("acme,globex", "sms", "--count", "1000001", says="2,000,000"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "says"), BAD)
def test_bad_input_is_one_sentence_and_exit_2(configured: Cli, argv: list[str], says: str) -> None:
    result = configured("plan", *argv)
    assert result.code == 2, result
    assert result.out == ""
    assert_one_sentence(result.err)
    assert says in result.err


# -- nothing real happens ----------------------------------------------------------------------


class ThreadedMail:
    """A ``MailServer`` on an event loop of its own in a background thread, for the CLI's
    ``asyncio.run``. Read ``mail`` after exit."""

    def __init__(self) -> None:
        self.mail = MailServer()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> MailServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.mail.__aenter__(), self._loop).result(10)
        return self.mail

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.mail.__aexit__(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


async def _rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            found = {}
            for table in metadata.sorted_tables:
                query = sa.select(table).order_by(*table.primary_key.columns)
                found[table.name] = [tuple(row) for row in await conn.execute(query)]
            return found
    finally:
        await engine.dispose()


def every_row(cli: Cli) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of ``cli``'s store."""
    assert cli.db_url is not None
    return asyncio.run(_rows(cli.db_url))


def queue_depth(cli: Cli) -> dict[str, tuple[int, int, int, int]]:
    """Queued, leased, delivered and dead of each tenant, as ``stats`` reads them."""
    states = ("queued", "leased", "delivered", "dead")
    return {d["tenant"]: tuple(d[s] for s in states) for d in cli.json("stats")["depth"]}


@pytest.fixture
def http() -> Iterator[ThreadedServer]:
    with ThreadedServer({"/hook": [Reply(200)]}) as server:
        yield server


@pytest.mark.slow
def test_plans_call_no_provider_and_write_nothing(cli: Cli, http: ThreadedServer) -> None:
    with ThreadedMail() as mail:
        cli.ok("tenant", "add", "acme", "--rate", "10")
        cli.ok("tenant", "add", "globex")
        cli.ok(
            "provider", "add", "hook", "--kind", "webhook", "--option", f"url={http.url('/hook')}"
        )
        options = ["host=127.0.0.1", f"port={mail.port}", "security=none", "from=me@example.com"]
        cli.ok("provider", "add", "mail", "--kind", "smtp", *(f"--option={o}" for o in options))
        for n in range(5):
            cli.ok("enqueue", "acme", "hook", f"user{n}@example.com")
            cli.ok("enqueue", "globex", "mail", f"user{n}@example.com")
        rows = every_row(cli)
        depth = queue_depth(cli)
        assert sum(queued for queued, _, _, _ in depth.values()) == 10

        backlog = cli.json("plan", "--backlog", "--set", "provider:hook=2")
        burst = cli.json("plan", "acme,globex", "hook", "--count", "40")
        replay = cli.json("plan", "--replay", "1")
        text = cli.ok("plan", "acme", "mail", "--count", "40", "--concurrency", "2")

        assert every_row(cli) == rows
        assert queue_depth(cli) == depth
    assert http.server.requests == []
    assert mail.sessions == []
    assert mail.mailbox.received == []

    assert backlog["current"]["notifications"] == replay["current"]["notifications"] == 10
    assert burst["current"]["notifications"] == 80
    for report in (backlog, replay):
        for name in ("hook", "mail"):
            source = report["current"]["providers"][name]["model"]["source"]
            assert source.startswith("assumed"), source
    assert backlog["proposed"]["tenants"]["acme"]["paced_by"] == "provider:hook"
    assert "assumed" in text
    assert "nothing was sent or written." in text


def test_a_real_provider_is_modelled_from_its_observed_sends(
    cli: Cli, http: ThreadedServer
) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "hook", "--kind", "webhook", "--option", f"url={http.url('/hook')}")
    cli.ok("simulate", "acme", "hook", "--count", "25", "--no-dispatch")
    cli.ok("worker", "--until-empty", "--quiet")
    assert len(http.server.requests) == 25

    report = cli.json("plan", "acme", "hook", "--count", "10")
    model = report["current"]["providers"]["hook"]["model"]
    assert model["source"] == "observed (25 recent sends)"
    assert model["error_rate"] == model["throttle_rate"] == 0.0
    assert len(http.server.requests) == 25
