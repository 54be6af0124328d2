"""Bad input on every ``omnipost`` command: exit 2 (1 when the store cannot be used), one
sentence on stderr, no traceback, and nothing written to the store.

Every case runs against one configured store per backend and compares a dump of every table
before and after, so a command that fails half-way shows up as a difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from app.cli import main
from engine import SecretBox
from engine.store import normalize_url
from engine.store.schema import metadata
from testkit.cli import Cli, assert_one_sentence, clean_env, run_process
from testkit.stores import BACKENDS, drop_pg_database, make_pg_database

SECRET = "hook-signing-s3cret"
CLOSED_PG = "postgresql://omnipost@127.0.0.1:1/omnipost"


@dataclass(frozen=True, slots=True)
class Setup:
    """A migrated store with tenants acme and globex, providers sim, audit (file) and hook
    (webhook, with a secret), one pair limit and one queued notification (id 1); and an
    empty, never migrated store on the same backend."""

    home: Path
    url: str
    unmigrated_url: str


SETUP_COMMANDS = [
    ["migrate"],
    ["tenant", "add", "acme", "--rate", "10"],
    ["tenant", "add", "globex"],
    ["provider", "add", "sim", "--kind", "simulated"],
    ["provider", "add", "audit", "--kind", "file", "--option", "path=@DIR/out.jsonl"],
    [
        "provider",
        "add",
        "hook",
        "--kind",
        "webhook",
        "--option",
        "url=http://127.0.0.1:9/",
        "--secret",
        f"signing_key={SECRET}",
    ],
    ["limit", "set", "acme", "sim", "--rate", "5", "--burst", "2"],
    ["enqueue", "acme", "sim", "bob@example.com", "--key", "k1"],
]


def _run_main(argv: list[str]) -> None:
    assert main(argv) == 0, argv


@pytest.fixture(scope="module", params=BACKENDS)
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    home = tmp_path_factory.mktemp("home")
    if request.param == "sqlite":
        urls = [f"sqlite:///{home / 'omnipost.db'}", f"sqlite:///{home / 'empty.db'}"]
    else:
        urls = [make_pg_database(), make_pg_database()]
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OMNIPOST_HOME", str(home))
            mp.setenv("OMNIPOST_DB", urls[0])
            mp.delenv("OMNIPOST_KEYS", raising=False)
            for argv in SETUP_COMMANDS:
                _run_main([a.replace("@DIR", str(home)) for a in argv])
        yield Setup(home, urls[0], urls[1])
    finally:
        if request.param == "postgres":
            for url in urls:
                drop_pg_database(url)


async def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (and the list of tables), to compare before and after."""
    engine = create_async_engine(normalize_url(url))

    def names(conn: sa.Connection) -> list[str]:
        return sorted(sa.inspect(conn).get_table_names())

    async def rows(conn: AsyncConnection, table: sa.Table) -> list[tuple[Any, ...]]:
        result = await conn.execute(sa.select(table).order_by(*table.primary_key.columns))
        return [tuple(row) for row in result]

    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(names)
            dump = {"": [tuple(tables)]}
            for table in metadata.sorted_tables:
                if table.name in tables:
                    dump[table.name] = await rows(conn, table)
            return dump
    finally:
        await engine.dispose()


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    if not url.startswith("sqlite:///"):
        return asyncio.run(_dump(url))
    # The same through the standard library: quicker, and it runs around every case.
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
        query = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        tables = [name for (name,) in conn.execute(query)]
        result: dict[str, list[tuple[Any, ...]]] = {"": [tuple(tables)]}
        for table in metadata.sorted_tables:
            if table.name in tables:
                result[table.name] = list(conn.execute(f"SELECT * FROM {table.name} ORDER BY 1"))
        return result


@pytest.fixture
def cli(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Cli]:
    """``omnipost`` on the configured store (through OMNIPOST_DB); checks nothing changed."""
    monkeypatch.setenv("OMNIPOST_HOME", str(setup.home))
    monkeypatch.setenv("OMNIPOST_DB", setup.url)
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    before = dump(setup.url)
    yield Cli(capsys)
    assert dump(setup.url) == before


# Input refused before the store is touched needs no second backend.
SQLITE_ONLY = pytest.mark.parametrize("setup", ["sqlite"], indirect=True)


def fails(cli: Cli, argv: list[str], code: int, says: str) -> None:
    result = cli(*argv)
    assert result.code == code, f"omnipost {argv} -> {result.code}: {result.err!r}"
    assert_one_sentence(result.err)
    assert says.lower() in result.err.lower(), result.err
    assert "Traceback" not in result.out
    assert SECRET not in result.out + result.err


def case(*argv: str, says: str = "") -> Any:
    return pytest.param(list(argv), says, id=" ".join(argv)[:80] or "(nothing)")


LIMITED = [
    ["tenant", "add", "newt"],
    ["tenant", "set", "acme"],
    ["provider", "add", "newp", "--kind", "simulated"],
    ["provider", "set", "sim"],
    ["limit", "set", "acme", "sim"],
]
BAD_RATES = ["abc", "0", "-1", "nan", "inf", "5/week", "1e400", "", "5/s/s", "0x10"]
BAD_BURSTS = [
    (["--burst", "5"], "--burst needs --rate"),
    (["--rate", "5", "--burst", "0.5"], "burst must be"),
    (["--rate", "5", "--burst", "nan"], "burst must be"),
    (["--rate", "5", "--burst", "inf"], "burst must be"),
    (["--rate", "5", "--burst", "-3"], "burst must be"),
    (["--rate", "5", "--burst", "abc"], "--burst"),
]
BAD_NAMES = [
    "a b",
    "ünïcode",
    "名前",
    "x'; DROP TABLE tenants;--",
    "a" * 200,
    "",
    "a/b",
    "a\nb",
    ".dot",
]
SQL = "x'; DROP TABLE tenants;--"

USAGE = [
    case("console", "--bogus", says="unrecognized arguments"),  # no command opens the console
    case("bogus", says="invalid choice: 'bogus'"),
    case("--db"),
    case("tenant", says="required: ACTION"),
    case("tenant", "remove", "acme", says="invalid choice"),
    case("tenant", "add", says="required: name"),
    case("tenant", "add", "x", "--disable", "--enable", says="not allowed with"),
    case("tenant", "list", "--bogus", says="unrecognized arguments"),
    case("tenant", "set", "acme", says="nothing to change"),
    case("tenant", "set", "acme", "--unlimited", "--rate", "5", says="not both"),
    case("provider", says="required: ACTION"),
    case("provider", "add", "p1", says="--kind"),
    case("provider", "test", "sim", says="recipient"),
    case("provider", "set", "sim", says="nothing to change"),
    case("limit", says="required: ACTION"),
    case("limit", "set", "acme", says="provider"),
    case("limit", "set", "acme", "sim", says="--rate"),
    case("limit", "set", "acme", "sim", "--rate", "5", "--clear", says="not both"),
    case("limit", "list", "extra", says="unrecognized"),
    case("migrate", "now", says="unrecognized"),
    case("stats", "--json", "--csv", says="unrecognized"),
    case("simulate", "acme", "sim", says="--count"),
    case("simulate", "acme", "sim", "--count", "0", says="at least 1"),
    case("simulate", "acme", "sim", "--count", "many", says="whole number"),
    case("simulate", "acme", "sim", "--count", "1", "--pattern", "bogus", says="invalid choice"),
    case("simulate", "acme", "sim", "--count", "1", "--duration", "-1", says="duration"),
    case("simulate", "acme", "sim", "--count", "1", "--duration", "nan", says="duration"),
    case("simulate", "acme", "sim", "--count", "1", "--concurrency", "0", says="at least 1"),
    case("simulate", ",", "sim", "--count", "1", says="at least one tenant"),
    case("worker", "--concurrency", "0", says="at least 1"),
    case("worker", "--concurrency", "-4", says="at least 1"),
    case("worker", "--concurrency", "many", says="whole number"),
    case("worker", "--lease-s", "0", says="above 0"),
    case("worker", "--prefetch", "-1", says="0 or more"),
    case("worker", "--prefetch", "some", says="whole number"),
    case("worker", "--lease-s", "nan", says="above 0"),
    case("worker", "--duration", "inf", says="above 0"),
    case("demo", "--count", "0", says="at least 1"),
    case("demo", "--count", "lots", says="whole number"),
    case("dead", says="required: ACTION"),
    case("dead", "retry", says="give the IDs"),
    case("dead", "discard", says="give the IDs"),
    case("dead", "retry", "abc", says="whole number"),
    case("dead", "retry", "0", says="at least 1"),
    case("dead", "discard", "-1", says="at least 1"),
    case("dead", "retry", "1", "--all", says="give the IDs"),
    case("dead", "retry", "1", says="not dead"),  # 1 is queued, not dead
    case("dead", "discard", "1", "999", says="2 of the IDs are not dead"),
    case("dead", "list", "--tenant", says="expected one argument"),
]

CONFLICTS_AND_UNKNOWN_NAMES = [
    case("tenant", "add", "acme", says="already exists"),
    case("provider", "add", "sim", "--kind", "file", "--option", "path=x", says="already exists"),
    case("tenant", "set", "nobody", "--rate", "5", says="no tenant named 'nobody'"),
    case("tenant", "set", SQL, "--rate", "5", says="no tenant named"),
    case("provider", "set", "nobody", "--rate", "5", says="no provider named 'nobody'"),
    case("provider", "set", SQL, "--rate", "5", says="no provider named"),
    case("provider", "test", "nobody", "x@example.com", says="no provider named"),
    case("limit", "set", "nobody", "sim", "--rate", "5", says="no tenant named"),
    case("limit", "set", "acme", "nobody", "--rate", "5", says="no provider named"),
    case("limit", "set", SQL, "sim", "--rate", "5", says="no tenant named"),
    case("enqueue", "nobody", "sim", "x@example.com", says="no tenant named"),
    case("enqueue", "acme", "nobody", "x@example.com", says="no provider named"),
    case("enqueue", "acme", SQL, "x@example.com", says="no provider named"),
    case("simulate", "nobody", "sim", "--count", "1", says="no tenant named"),
    case("simulate", "acme,nobody", "sim", "--count", "1", says="no tenant named"),
    case("simulate", "acme", "nobody", "--count", "1", says="no provider named"),
    case("dead", "list", "--tenant", "nobody", says="no tenant named"),
    case("dead", "list", "--tenant", SQL, says="no tenant named"),
    case("dead", "retry", "--all", "--tenant", "nobody", says="no tenant named"),
    case("dead", "discard", "1", "--tenant", "nobody", says="no tenant named"),
]

RATES_ABOVE_1 = ["--option", "error_rate=0.6", "--option", "permanent_rate=0.6"]
PROVIDERS = [
    case("provider", "add", "p1", "--kind", "nope", says="kind 'nope' is not known"),
    case("provider", "add", "p1", "--kind", "", says="kind '' is not known"),
    case("provider", "set", "sim", "--kind", "nope", says="kind 'nope' is not known"),
    case("provider", "set", "sim", "--kind", "file", says="option 'path' is required"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "bogus=1", says="'bogus'"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "error_rate=2"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "error_rate=nan"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "latency_ms=abc"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "latency_ms=-1"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "seed=x", says="seed"),
    case("provider", "add", "p1", "--kind", "simulated", *RATES_ABOVE_1, says="at most 1"),
    case("provider", "add", "p1", "--kind", "simulated", "--secret", "k=v", says="secret 'k'"),
    case("provider", "add", "p1", "--kind", "file", says="'path' is required"),
    case("provider", "add", "p1", "--kind", "file", "--option", "path=@DIR", says="folder"),
    case("provider", "add", "p1", "--kind", "webhook", says="'url' is required"),
    case("provider", "add", "p1", "--kind", "webhook", "--option", "url=ftp://x/", says="url"),
    case("provider", "add", "p1", "--kind", "smtp", "--option", "host=h", says="'from'"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "noequals", says="KEY=VALUE"),
    case("provider", "add", "p1", "--kind", "simulated", "--option", "=x", says="KEY=VALUE"),
    case("provider", "set", "sim", "--option", "error_rate=7", says="error_rate"),
    case("provider", "set", "audit", "--option", "path=", says="'path' is required"),
    case("provider", "set", "hook", "--option", "url=nope", says="url"),
    case("provider", "set", "hook", "--secret", "bogus=1", says="secret 'bogus'"),
]

ENQUEUE = [
    case("enqueue", says="needs TENANT PROVIDER RECIPIENT"),
    case("enqueue", "acme", "sim", says="needs TENANT PROVIDER RECIPIENT"),
    case("enqueue", "acme", "sim", "", says="needs TENANT PROVIDER RECIPIENT"),
    case("enqueue", "acme", "sim", "x", "--payload", "{bad", says="not valid JSON"),
    case("enqueue", "acme", "sim", "x", "--payload", "", says="not valid JSON"),
    case("enqueue", "acme", "sim", "x", "--payload", "[1]", says="JSON object"),
    case("enqueue", "acme", "sim", "x", "--payload", "null", says="JSON object"),
    case("enqueue", "acme", "sim", "x", "--payload", '"text"', says="JSON object"),
    case("enqueue", "acme", "sim", "x", "--payload", '{"a": NaN}', says="not valid JSON"),
    case("enqueue", "acme", "sim", "x", "--payload", '{"a": -Infinity}', says="not valid JSON"),
    case("enqueue", "acme", "sim", "x", "--priority", "high", says="whole number"),
    case("enqueue", "acme", "sim", "x", "--priority", "1.5", says="whole number"),
    case("enqueue", "acme", "sim", "x", "--file", "f.jsonl", says="not both"),
    case("enqueue", "--file", "@DIR/missing.jsonl", says="cannot read"),
    case("enqueue", "--file", "@DIR", says="cannot read"),
]

# These reach the store (or would, unchecked): a key or priority the column cannot hold.
ENQUEUE_LIMITS = [
    case("enqueue", "acme", "sim", "x", "--key", "", says="idempotency key"),
    case("enqueue", "acme", "sim", "x", "--key", "k" * 201, says="idempotency key"),
    case("enqueue", "acme", "sim", "x", "--priority", str(2**31), says="priority"),
    case("enqueue", "acme", "sim", "x", "--priority", str(-(2**70)), says="priority"),
]

# Every bad rate and burst on `tenant add` and `limit set`, two of each on the other commands.
RATES = [
    case(*cmd, "--rate", rate, says="rate")
    for n, cmd in enumerate(LIMITED)
    for rate in (BAD_RATES if n in (0, 4) else ["0", "5/week"])
] + [
    case(*cmd, *flags, says=says)
    for n, cmd in enumerate(LIMITED)
    for flags, says in (BAD_BURSTS if n in (0, 4) else BAD_BURSTS[:2])
]

NAMES = [case("tenant", "add", name, says="tenant name") for name in BAD_NAMES] + [
    case("provider", "add", name, "--kind", "simulated", says="provider name") for name in BAD_NAMES
]


def _substituted(argv: list[str], setup: Setup) -> list[str]:
    return [a.replace("@DIR", str(setup.home)) for a in argv]


@SQLITE_ONLY
@pytest.mark.parametrize(("argv", "says"), USAGE + RATES + NAMES + PROVIDERS + ENQUEUE)
def test_bad_usage_rates_names_options_and_payloads_exit_2(
    cli: Cli, setup: Setup, argv: list[str], says: str
) -> None:
    fails(cli, _substituted(argv, setup), 2, says)


@pytest.mark.parametrize(("argv", "says"), CONFLICTS_AND_UNKNOWN_NAMES + ENQUEUE_LIMITS)
def test_conflicts_unknown_names_and_oversized_values_exit_2(
    cli: Cli, argv: list[str], says: str
) -> None:
    fails(cli, argv, 2, says)


GOOD_LINES = [
    {"tenant": "acme", "provider": "sim", "recipient": "a@example.com", "key": "f1"},
    {"tenant": "globex", "provider": "audit", "recipient": "b@example.com", "key": "f2"},
    {"tenant": "globex", "provider": "sim", "recipient": "c@example.com"},
]
LINE = {"tenant": "globex", "provider": "sim", "recipient": "x@example.com"}
# Lines of a second tenant that would reach the store: after acme's lines were written.
STORE_LINES = [
    (json.dumps({**LINE, "tenant": "nobody"}), "no tenant named 'nobody'"),
    (json.dumps({**LINE, "tenant": SQL}), "no tenant named"),
    (json.dumps({**LINE, "provider": "nobody"}), "no provider named 'nobody'"),
    (json.dumps({**LINE, "key": "k" * 201}), "'key'"),
    (json.dumps({**LINE, "priority": 2**40}), "priority"),
]
BAD_LINES = [
    ("{bad", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('"text"', "expected a JSON object"),
    (json.dumps({"tenant": "globex", "provider": "sim"}), "'recipient'"),
    (json.dumps({**LINE, "recipient": 5}), "'recipient'"),
    (json.dumps({**LINE, "recipient": ""}), "'recipient'"),
    (json.dumps({**LINE, "tenant": None}), "'tenant'"),
    (json.dumps({**LINE, "provider": ["sim"]}), "'provider'"),
    (json.dumps({**LINE, "payload": [1]}), "'payload'"),
    (json.dumps({**LINE, "payload": "{}"}), "'payload'"),
    ('{"tenant": "globex", "provider": "sim", "recipient": "x", "payload": {"a": NaN}}', "JSON"),
    (json.dumps({**LINE, "key": 5}), "'key'"),
    (json.dumps({**LINE, "key": ""}), "'key'"),
    (json.dumps({**LINE, "priority": "high"}), "'priority'"),
    (json.dumps({**LINE, "priority": True}), "'priority'"),
    (json.dumps({**LINE, "priority": 1.5}), "'priority'"),
]


def lines(bad: list[tuple[str, str]]) -> list[Any]:
    return [pytest.param(text, says, id=text[:60]) for text, says in bad]


def batch(bad: str) -> str:
    """Good lines of two tenants, then one bad line."""
    return "".join(json.dumps(line) + "\n" for line in GOOD_LINES) + bad + "\n"


def enqueue_file(cli: Cli, tmp_path: Path, bad: str, says: str) -> None:
    path = tmp_path / "batch.jsonl"
    path.write_text(batch(bad), encoding="utf-8")
    fails(cli, ["enqueue", "--file", str(path)], 2, says)


@SQLITE_ONLY
@pytest.mark.parametrize(("bad", "says"), lines(BAD_LINES))
def test_a_file_with_one_bad_line_writes_nothing(
    cli: Cli, tmp_path: Path, bad: str, says: str
) -> None:
    enqueue_file(cli, tmp_path, bad, says)


@pytest.mark.parametrize(("bad", "says"), lines(STORE_LINES))
def test_a_file_with_one_bad_line_writes_nothing_on_either_store(
    cli: Cli, tmp_path: Path, bad: str, says: str
) -> None:
    enqueue_file(cli, tmp_path, bad, says)


@SQLITE_ONLY
@pytest.mark.parametrize(("bad", "says"), lines([BAD_LINES[0], BAD_LINES[3], STORE_LINES[0]]))
def test_bad_lines_on_stdin_write_nothing(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, bad: str, says: str
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(batch(bad)))
    fails(cli, ["enqueue", "--file", "-"], 2, says)


@SQLITE_ONLY
def test_a_file_that_is_not_text(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b'{"tenant": "acme"}\n\xff\xfe\x00garbage')
    fails(cli, ["enqueue", "--file", str(path)], 2, "cannot read")


STORE_COMMANDS = [
    ["migrate"],
    ["tenant", "add", "newt"],
    ["tenant", "list"],
    ["provider", "list", "--json"],
    ["limit", "list"],
    ["enqueue", "acme", "sim", "x@example.com"],
    ["worker", "--until-empty", "--quiet"],
    ["simulate", "acme", "sim", "--count", "1"],
    ["stats", "--json"],
    ["dead", "retry", "1"],
]
BAD_URLS = [
    ("mysql://u@localhost/db", "scheme 'mysql' is not supported"),
    ("not a url", "not valid"),
    ("sqlite://", "needs a file path"),
    ("sqlite:///:memory:", "needs a file path"),
    ("sqlite:///nonexistent/dir/x.db", "does not exist"),
    ("postgresql://u@h:x/db", "not valid"),
]
# The first URL on every command, the others on two.
URL_CASES = [
    pytest.param(url, says, argv, id=f"{url} {' '.join(argv)}")
    for n, (url, says) in enumerate(BAD_URLS)
    for argv in (STORE_COMMANDS if n == 0 else [STORE_COMMANDS[0], STORE_COMMANDS[6]])
]


@SQLITE_ONLY
@pytest.mark.parametrize(("url", "says", "argv"), URL_CASES)
def test_bad_store_urls_exit_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, url: str, says: str, argv: list[str]
) -> None:
    fails(cli, [*argv, "--db", url], 2, says)
    monkeypatch.setenv("OMNIPOST_DB", url)  # the same from the environment
    fails(cli, argv, 2, says)


@SQLITE_ONLY
@pytest.mark.parametrize("argv", [STORE_COMMANDS[0], STORE_COMMANDS[6]], ids=" ".join)
def test_an_unreachable_postgres_is_a_runtime_failure(cli: Cli, argv: list[str]) -> None:
    fails(cli, [*argv, "--db", CLOSED_PG], 1, "cannot be reached")


@pytest.mark.parametrize("argv", STORE_COMMANDS[1:], ids=" ".join)
def test_an_unmigrated_store_is_refused(cli: Cli, setup: Setup, argv: list[str]) -> None:
    before = dump(setup.unmigrated_url)
    fails(cli, [*argv, "--db", setup.unmigrated_url], 1, "run `omnipost migrate`")
    assert dump(setup.unmigrated_url) == before == {"": [()]}


KEY_CASES = [
    pytest.param("garbage", "encryption key is not valid", argv, id=f"garbage {' '.join(argv)}")
    for argv in STORE_COMMANDS
] + [
    pytest.param(",", "at least one encryption key", STORE_COMMANDS[1], id="comma"),
    pytest.param("A" * 44 + ",x", "encryption key is not valid", STORE_COMMANDS[1], id="2nd-bad"),
]


@SQLITE_ONLY
@pytest.mark.parametrize(("keys", "says", "argv"), KEY_CASES)
def test_garbage_keys_exit_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, keys: str, says: str, argv: list[str]
) -> None:
    monkeypatch.setenv("OMNIPOST_KEYS", keys)
    fails(cli, argv, 2, says)


@pytest.mark.parametrize(
    "argv",
    [
        ["tenant", "add", "newt"],
        ["provider", "list"],
        ["provider", "set", "hook", "--rate", "5"],
        ["enqueue", "acme", "sim", "x@example.com"],
        ["worker", "--until-empty", "--quiet"],
    ],
    ids=" ".join,
)
def test_keys_that_do_not_open_the_stored_secrets(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("OMNIPOST_KEYS", SecretBox.generate_key())
    fails(cli, argv, 1, "cannot be decrypted")


# -- as a real process ------------------------------------------------------------------------

PROCESS_CASES: list[tuple[list[str], str, int, dict[str, str]]] = [
    (["bogus"], "", 2, {}),
    (["tenant", "add", SQL], "", 2, {}),
    (["simulate", "acme", "nobody", "--count", "1"], "", 2, {}),
    (["enqueue", "--file", "-"], '{"tenant": "acme"}\n', 2, {}),
    (["worker", "--until-empty", "--db", CLOSED_PG], "", 1, {}),
    (["stats"], "", 2, {"OMNIPOST_KEYS": "garbage"}),
]


@pytest.mark.slow
def test_no_traceback_at_the_process_level(tmp_path: Path) -> None:
    """The cases run concurrently, each as ``python -m app``: one sentence, right exit code."""
    url = f"sqlite:///{tmp_path / 'omnipost.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(tmp_path))
        mp.setenv("OMNIPOST_DB", url)
        _run_main(["migrate"])
        _run_main(["tenant", "add", "acme"])
        _run_main(["provider", "add", "sim", "--kind", "simulated"])
    before = dump(url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "app", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(tmp_path, OMNIPOST_DB=url, **env),
        )
        for argv, _, _, env in PROCESS_CASES
    ]
    for proc, (argv, stdin, code, _) in zip(procs, PROCESS_CASES, strict=True):
        out, err = proc.communicate(stdin, timeout=120)
        assert proc.returncode == code, (argv, proc.returncode, err)
        assert_one_sentence(err)
        assert "Traceback" not in out
    assert dump(url) == before


@pytest.mark.slow
def test_a_worker_whose_keys_cannot_open_the_recipients_stops_and_gives_them_back(
    tmp_path: Path,
) -> None:
    """No provider has a secret, so the worker starts; its first claim cannot read the
    recipients. It exits 1 with one sentence (it used to pause and retry for ever), and the
    notification is queued again at once, for a worker with the right keys to deliver."""
    url = f"sqlite:///{tmp_path / 'omnipost.db'}"
    right = SecretBox.generate_key()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(tmp_path))
        mp.setenv("OMNIPOST_DB", url)
        mp.setenv("OMNIPOST_KEYS", right)
        for argv in (
            ["migrate"],
            ["tenant", "add", "acme"],
            ["provider", "add", "sim", "--kind", "simulated"],
            ["enqueue", "acme", "sim", "someone@example.com"],
        ):
            _run_main(argv)
    worker = ["worker", "--until-empty", "--quiet"]
    wrong = run_process(
        worker, clean_env(tmp_path, OMNIPOST_DB=url, OMNIPOST_KEYS=SecretBox.generate_key())
    )
    assert wrong.code == 1, wrong.err
    assert_one_sentence(wrong.err)
    assert "cannot be decrypted" in wrong.err and "OMNIPOST_KEYS" in wrong.err
    with sqlite3.connect(tmp_path / "omnipost.db") as db:
        assert db.execute("SELECT state, lease_owner FROM notifications").fetchall() == [
            ("queued", None)
        ]
    fine = run_process(worker, clean_env(tmp_path, OMNIPOST_DB=url, OMNIPOST_KEYS=right))
    assert fine.code == 0, fine.err
    with sqlite3.connect(tmp_path / "omnipost.db") as db:
        assert db.execute("SELECT state FROM notifications").fetchall() == [("delivered",)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/Wayland check is Linux's")
def test_the_console_without_a_screen_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    assert main(["console"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a screen" in err[0], err
