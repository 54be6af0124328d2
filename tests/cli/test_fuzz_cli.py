"""Fuzzed input through ``app.cli.main`` in-process: names, rates, bursts, options, recipients,
payloads, keys and whole argument lists, with unicode, SQL fragments, control characters,
undecodable bytes (as a shell hands them over: lone surrogates) and sizes up to 100 KB.

Every run ends one of two ways: exit 0 with the effect asked for (checked in the store), or
exit 1 or 2 with exactly one sentence on stderr, no traceback, and no row changed anywhere.
Standard output is strict UTF-8 as in a real process, so printing what cannot be encoded
fails here as it would there. SQLite only: the Postgres paths are the same code above the
store, and the bad-input suite covers them per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.cli import main
from app.paths import Paths, load_box
from engine.core.domain import parse_rate, validate_name
from engine.core.errors import ConfigError
from engine.store.schema import metadata
from testkit.cli import assert_one_sentence

NASTY = [
    "x'; DROP TABLE tenants;--",
    "' OR '1'='1",
    "acme' --",
    '"; DELETE FROM notifications; --',
    "1; UPDATE notifications SET state='delivered'",
    "\x00",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "a\nb",
    "line\r\n",
    "\t",
    "\u202eevil",
    "\ufeff",
    "\udcff",  # an undecodable byte in argv, as Python hands it over
    "x\ud800y",
    "名前",
    "ünïcode",
    "🙂",
    "%s%n{0}${HOME}",
    "../../etc/passwd",
    "",
    " ",
    "-",
    "--",
    "-h",
    "--help",
    "acme",
    "sim",
    "5",
    "5/s",
    "1e400",
    "nan",
]

small_text = st.text(max_size=20)
mixed = st.builds(lambda a, b, c: a + b + c, small_text, st.sampled_from(NASTY), small_text)
huge = st.builds(
    lambda seed, n: (seed * n)[:100_000],
    st.sampled_from(["a", "名", "🙂", "x'; --", "\udcff", "ab\n"]),
    st.integers(1_000, 100_000),
)
nasty_text = st.one_of(st.sampled_from(NASTY), small_text, mixed, huge)
valid_name = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
good_rate = st.from_regex(r"\A[1-9][0-9]{0,3}(\.[0-9])?(/(s|sec|min|m|h|hr))?\Z")
rate_text = st.one_of(
    nasty_text,
    st.from_regex(
        r"\A\s*-?[0-9]{0,4}\.?[0-9]{0,3}(e[-+]?[0-9]{1,3})?\s*(/\s*(s|sec|min|m|h|hr|w))?\Z"
    ),
)

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# -- running the CLI ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    code: int
    out: str
    err: str


def run(*argv: str) -> Result:
    """``main(argv)`` with stdout strict UTF-8 (as a process's) and stderr backslash-escaped."""
    result = _run(*argv)
    event(f"exit {result.code}")
    return result


def _run(*argv: str) -> Result:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 1
        out.flush()
        err.flush()
    return Result(code, _text(out), _text(err))


def _text(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8")


Dump = dict[str, list[tuple[Any, ...]]]


@dataclass
class Setup:
    home: Path
    db: Path

    def dump(self) -> Dump:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return {
                t.name: list(conn.execute(f"SELECT * FROM {t.name} ORDER BY 1"))
                for t in metadata.sorted_tables
            }

    def exists(self, table: str, name: str) -> bool:
        return _encodable(name) and bool(self.rows(f"SELECT 1 FROM {table} WHERE name = ?", name))

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return list(conn.execute(sql, params))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One store for the module: tenants acme and globex; providers sim (simulated) and
    audit (file)."""
    home = tmp_path_factory.mktemp("fuzz")
    db = home / "omnipost.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(home))
        mp.setenv("OMNIPOST_DB", f"sqlite:///{db}")
        mp.delenv("OMNIPOST_KEYS", raising=False)
        mp.delenv("OMNIPOST_REDIS", raising=False)
        for argv in (
            ["migrate"],
            ["tenant", "add", "acme"],
            ["tenant", "add", "globex"],
            ["provider", "add", "sim", "--kind", "simulated"],
            ["provider", "add", "audit", "--kind", "file", "--option", f"path={home}/out.jsonl"],
        ):
            assert _run(*argv).code == 0, argv
        yield Setup(home, db)


def refused(result: Result, setup: Setup, before: Dump) -> None:
    """A failure: one sentence on stderr, no traceback, nothing written."""
    assert result.code in (1, 2), result
    assert_one_sentence(result.err)
    assert "Traceback" not in result.out
    assert setup.dump() == before


def changed_tables(before: Dump, after: Dump) -> set[str]:
    return {name for name in before if before[name] != after[name]}


# -- rates -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(rate_text)
def test_parse_rate_gives_a_positive_finite_rate_or_a_config_error(text: str) -> None:
    try:
        rate = parse_rate(text)
    except ConfigError as exc:
        assert exc.message.endswith(".") and "\n" not in exc.message
        return
    assert isinstance(rate, float) and math.isfinite(rate) and rate > 0, (text, rate)


# -- tenants -----------------------------------------------------------------------------------


def _expected_limit(rate: str | None, burst: str | None) -> tuple[float, float] | None:
    """The (rate, burst) ``tenant add`` must store, None for no limit; raises ConfigError (or
    ValueError for a burst that is not a number) when the flags are bad."""
    if rate is None:
        if burst is not None:
            raise ConfigError("--burst needs --rate")
        return None
    per_s = parse_rate(rate)
    value = float(burst) if burst is not None else max(1.0, per_s)
    if not math.isfinite(value) or value < 1:
        raise ConfigError("bad burst")
    return per_s, value


@pytest.mark.slow
@FUZZ
@given(
    name=st.one_of(valid_name, valid_name, nasty_text),
    rate=st.one_of(st.none(), good_rate, rate_text),
    burst=st.one_of(
        st.none(),
        st.none(),
        st.sampled_from(["1", "2.5", "0.5", "nan", "inf", "-3", "1e308"]),
        mixed,
    ),
    disabled=st.booleans(),
)
def test_tenant_add(
    setup: Setup, name: str, rate: str | None, burst: str | None, disabled: bool
) -> None:
    argv = ["tenant", "add"]
    argv += [f"--rate={rate}"] if rate is not None else []
    argv += [f"--burst={burst}"] if burst is not None else []
    argv += ["--disable"] if disabled else []
    try:
        validate_name("tenant", name)
        limit = _expected_limit(rate, burst)
        ok = not setup.exists("tenants", name)
    except ValueError:  # ConfigError, or a burst float() cannot read
        ok = False
    before = setup.dump()
    result = run(*argv, "--", name)
    if not ok:
        refused(result, setup, before)
        return
    assert result.code == 0, result
    [(rate_per_s, stored_burst, enabled)] = setup.rows(
        "SELECT rate_per_s, burst, enabled FROM tenants WHERE name = ?", name
    )
    stored = None if rate_per_s is None else (rate_per_s, stored_burst)
    assert stored == limit and enabled == (not disabled)
    assert changed_tables(before, setup.dump()) == {"tenants", "audit_log"}


# -- providers ---------------------------------------------------------------------------------

option_key = st.one_of(
    st.sampled_from(["path", "url", "latency_ms", "error_rate", "seed", "header.X-Team", "host"]),
    nasty_text,
)
option_value = st.one_of(
    st.sampled_from(["1", "0.5", "http://127.0.0.1:9/", "ftp://x/", "/tmp/x.jsonl", ""]),
    nasty_text,
)
pairs = st.lists(st.tuples(option_key, option_value), max_size=2)
# (kind, options, secrets) that are valid as they stand; the test may add fuzzed pairs.
GOOD_CONFIGS: list[tuple[str, list[tuple[str, str]], list[tuple[str, str]]]] = [
    ("simulated", [], []),
    ("simulated", [("latency_ms", "1"), ("error_rate", "0.5"), ("seed", "7")], []),
    ("file", [("path", "fuzz-out.jsonl")], []),
    ("webhook", [("url", "http://127.0.0.1:9/hook")], [("signing_key", "k")]),
    ("smtp", [("host", "127.0.0.1"), ("from", "a@example.com"), ("security", "none")], []),
]


@pytest.mark.slow
@FUZZ
@given(
    name=st.one_of(valid_name, valid_name, nasty_text),
    config=st.sampled_from(GOOD_CONFIGS),
    kind=st.one_of(st.none(), st.none(), nasty_text),
    more_options=st.one_of(st.just([]), st.just([]), pairs),
    more_secrets=st.one_of(st.just([]), st.just([]), pairs),
)
def test_provider_add(
    setup: Setup,
    name: str,
    config: tuple[str, list[tuple[str, str]], list[tuple[str, str]]],
    kind: str | None,
    more_options: list[tuple[str, str]],
    more_secrets: list[tuple[str, str]],
) -> None:
    good_kind, options, secrets = config
    kind = good_kind if kind is None else kind
    options, secrets = options + more_options, secrets + more_secrets
    argv = ["provider", "add", f"--kind={kind}"]
    for flag, given_pairs in (("--option", options), ("--secret", secrets)):
        argv += [f"{flag}={k}={v}" for k, v in given_pairs]
    before = setup.dump()
    result = run(*argv, "--", name)
    if result.code != 0:
        refused(result, setup, before)
        return
    # Only a name, kind and options that are all valid get here.
    validate_name("provider", name)
    [(stored_kind, stored_options, stored_secrets)] = setup.rows(
        "SELECT kind, options, secrets FROM providers WHERE name = ?", name
    )
    assert stored_kind == kind
    assert json.loads(stored_options) == dict(options)
    assert (stored_secrets is None) == (not secrets)
    for _, value in secrets:
        assert len(value) < 3 or value not in result.out + stored_secrets
    assert changed_tables(before, setup.dump()) == {"providers", "audit_log"}


# -- enqueue -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | nasty_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(nasty_text, inner, max_size=3),
    max_leaves=8,
)
payload_text = st.one_of(
    st.dictionaries(small_text | st.sampled_from(NASTY), json_values, max_size=4).map(json.dumps),
    huge.map(lambda text: json.dumps({"text": text})),
    nasty_text,
    st.sampled_from(['{"a": NaN}', "[1]", "null", '{"a": 1', '{"a": "\\ud800"}']),
)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _expected_payload(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


valid_text = st.one_of(
    st.text(min_size=1, max_size=30),
    st.sampled_from([t for t in NASTY if t and _encodable(t)]),
    huge.filter(_encodable),
)
FIELDS = ("tenant", "provider", "recipient", "payload", "key", "priority")


@pytest.mark.slow
@FUZZ
@given(
    good=st.fixed_dictionaries(
        {
            "tenant": st.just("acme"),
            "provider": st.sampled_from(["sim", "audit"]),
            "recipient": valid_text,
            "payload": st.dictionaries(small_text, json_values, max_size=4).map(json.dumps)
            | huge.map(lambda text: json.dumps({"text": text})),
            "key": st.none() | small_text.filter(bool) | st.sampled_from(["k" * 200, "名" * 200]),
            "priority": st.integers(-(2**31), 2**31 - 1).map(str),
        }
    ),
    broken=st.sampled_from([None, None, *FIELDS]),
    junk=st.one_of(nasty_text, payload_text, st.sampled_from([str(2**31), str(-(2**31) - 1)])),
)
def test_enqueue(setup: Setup, good: dict[str, Any], broken: str | None, junk: str) -> None:
    fields = {**good, **({broken: junk} if broken else {})}
    tenant, provider, recipient, payload, key, priority = (fields[f] for f in FIELDS)
    argv = ["enqueue", f"--payload={payload}", f"--priority={priority}"]
    argv += [f"--key={key}"] if key is not None else []
    expected = _expected_payload(payload)
    ok = (
        setup.exists("tenants", tenant)  # the other tests add tenants and providers
        and setup.exists("providers", provider)
        and recipient not in ("", "--")  # argparse drops a literal "--", even after "--"
        and _encodable(recipient)
        and expected is not None
        # argparse reads ``--key=--`` as the option without its value (Python 3.11).
        and (key is None or (0 < len(key) <= 200 and _encodable(key) and key != "--"))
        and _priority(priority)
    )
    before = setup.dump()
    result = run(*argv, "--", tenant, provider, recipient)
    if not ok:
        refused(result, setup, before)
        return
    assert result.code == 0, result
    word, _, rest = result.out.partition("queued as ")
    n_id = int(rest.split(" ", 1)[0])
    [(stored_key, stored_payload, token, stored_priority)] = setup.rows(
        "SELECT idempotency_key, payload, recipient, priority FROM notifications WHERE id = ?",
        n_id,
    )
    if word == "already ":  # the key was used by an earlier example
        assert stored_key == key and setup.dump() == before
        return
    assert word == "" and (key is None or stored_key == key)
    assert json.loads(stored_payload) == expected and stored_priority == int(priority)
    assert load_box(Paths(setup.home)).decrypt(token) == recipient
    # queue_counts moves with the rows (the triggers of migration 0003).
    assert changed_tables(before, setup.dump()) == {"notifications", "queue_counts"}


def _priority(text: str) -> bool:
    try:
        return -(2**31) <= int(text) < 2**31
    except ValueError:
        return False


line_value = st.one_of(
    nasty_text, st.integers(), st.none(), st.booleans(), st.lists(small_text, max_size=2)
)


@pytest.mark.slow
@FUZZ
@given(
    good=st.fixed_dictionaries(
        {
            "tenant": st.just("globex"),
            "provider": st.sampled_from(["sim", "audit"]),
            "recipient": valid_text,
            "payload": st.dictionaries(small_text, json_values, max_size=3),
            "key": small_text.filter(bool),
            "priority": st.integers(-(2**31), 2**31 - 1),
        }
    ),
    broken=st.sampled_from([None, None, *FIELDS, "extra"]),
    junk=line_value,
)
def test_enqueue_file_is_all_or_nothing(
    setup: Setup, good: dict[str, Any], broken: str | None, junk: object
) -> None:
    """A line of acme's, then a fuzzed line of globex's, written in a later transaction: when
    the second is bad, the first must not have been written either."""
    line = {**good, **({broken: junk} if broken else {})}
    first = {"tenant": "acme", "provider": "sim", "recipient": "a@example.com"}
    path = setup.home / "batch.jsonl"
    path.write_text(f"{json.dumps(first)}\n{json.dumps(line)}\n", encoding="utf-8")
    before = setup.dump()
    result = run("enqueue", "--file", str(path))
    if result.code != 0:
        refused(result, setup, before)
        return
    fresh = int(result.out.removeprefix("queued ").split(",")[0])
    after = setup.dump()
    assert len(after["notifications"]) == len(before["notifications"]) + fresh
    assert changed_tables(before, after) <= {"notifications", "queue_counts"}


# -- anything at all ---------------------------------------------------------------------------

# Commands that start no dispatch, open no window and reach no network.
COMMANDS = [
    ["migrate"],
    ["tenant", "add"],
    ["tenant", "set"],
    ["tenant", "list"],
    ["provider", "add"],
    ["provider", "set"],
    ["provider", "list"],
    ["limit", "set"],
    ["limit", "list"],
    ["enqueue"],
    ["stats"],
    ["dead", "list"],
    ["dead", "retry"],
    ["dead", "discard"],
    ["simulate", "--no-dispatch", "--count=1"],
]
FLAGS = [
    "--json",
    "--rate",
    "--burst",
    "--unlimited",
    "--clear",
    "--disable",
    "--enable",
    "--kind",
    "--option",
    "--secret",
    "--payload",
    "--key",
    "--priority",
    "--tenant",
    "--all",
    "--file",
    "--count",
    "-v",
]
token = st.one_of(st.sampled_from(FLAGS), nasty_text, st.integers(-5, 10).map(str))


@pytest.mark.slow
@FUZZ
@given(command=st.sampled_from(COMMANDS), tokens=st.lists(token, max_size=6))
def test_any_arguments(setup: Setup, command: list[str], tokens: list[str]) -> None:
    before = setup.dump()
    result = run(*command, *tokens)
    assert "Traceback" not in result.out + result.err
    if result.code != 0:
        refused(result, setup, before)
