"""A secrets scan: a whole session through the CLI with known secret values (recipients, a
webhook signing key and credential header, an SMTP password, a Postgres password in the store
URL), then a search of every output, every log, every --json export, the database (the SQLite
files with their WAL, or every Postgres row) and every other file in the data directory for
those values in plain text. None may be found.

The one place they legitimately appear is the ``file`` provider's delivery file: it is the
delivery channel, so it holds the recipient by design (like the body a webhook receives). It
is excluded from the scan, and read only to prove the session really delivered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from engine.store import normalize_url
from engine.store.schema import metadata
from testkit.cli import Cli, assert_one_sentence, clean_env, run_process
from testkit.servers import Reply, Request, ThreadedServer

EMAIL = "carol.secret@example.com"
PHONE = "+15557654321"
SIGNING_KEY = "whsec-S1gn1ngK3y-first"
NEW_SIGNING_KEY = "whsec-S1gn1ngK3y-second"
AUTH_HEADER = "Bearer hdr-T0ken-value"
SMTP_PASSWORD = "smtp-Pa55w0rd-value"
PG_PASSWORD = "S3cretPw"
SECRETS = (EMAIL, PHONE, SIGNING_KEY, NEW_SIGNING_KEY, AUTH_HEADER, SMTP_PASSWORD, PG_PASSWORD)
# Distinctive parts too, so a value cut short or reformatted still shows up.
NEEDLES = (*SECRETS, "carol.secret", "5557654321", "S1gn1ngK3y", "hdr-T0ken", "Pa55w0rd")


def found(text: str | bytes) -> list[str]:
    """The needles that occur in ``text``."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    return [n for n in NEEDLES if n.encode() in raw]


def _echo(request: Request) -> Reply:
    """Refuses, echoing the request (with the recipient) back: the error must not keep it."""
    return Reply(400, {"Content-Type": "application/json"}, request.body)


@pytest.fixture
def server() -> Iterator[ThreadedServer]:
    with ThreadedServer({"/hook": [Reply(200)], "/echo": [_echo]}) as threaded:
        yield threaded


async def _table_dump(url: str) -> str:
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            rows = [repr(list(await conn.execute(sa.select(t)))) for t in metadata.sorted_tables]
    finally:
        await engine.dispose()
    return "\n".join(rows)


def _with_password(url: str) -> str:
    """The test database's URL with a password in it (the server trusts loopback, so any
    password is accepted, and this one is only ever seen by OmniPost)."""
    if url.startswith("sqlite"):
        return url
    return make_url(url).set(password=PG_PASSWORD).render_as_string(hide_password=False)


def _configure(cli: Cli, server: ThreadedServer, delivery_file: Path) -> None:
    cli.ok("migrate")
    cli.ok("tenant", "add", "acme", "--rate", "100")
    cli.ok("tenant", "list")
    cli.json("tenant", "list")
    cli.ok(
        "provider", "add", "hook", "--kind", "webhook",
        "--option", f"url={server.url('/hook')}",
        "--secret", f"signing_key={SIGNING_KEY}",
        "--secret", f"header.Authorization={AUTH_HEADER}",
    )  # fmt: skip
    cli.ok("provider", "set", "hook", "--secret", f"signing_key={NEW_SIGNING_KEY}")
    cli.ok("provider", "add", "echo", "--kind", "webhook", "--option", f"url={server.url('/echo')}")
    cli.ok(
        "provider", "add", "mail", "--kind", "smtp",
        "--option", "host=127.0.0.1", "--option", "port=1", "--option", "from=ops@example.com",
        "--option", "timeout_s=2",
        "--secret", "username=ops", "--secret", f"password={SMTP_PASSWORD}",
    )  # fmt: skip
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={delivery_file}")
    cli.ok("provider", "add", "bounce", "--kind", "simulated", "--option", "permanent_rate=1")
    cli.ok("provider", "list")
    cli.json("provider", "list")


def _enqueue(cli: Cli, home: Path) -> None:
    payload = json.dumps({"subject": "hi", "text": "your code is 1234"})
    for provider, recipient in (("hook", EMAIL), ("echo", PHONE), ("audit", EMAIL)):
        cli.ok("enqueue", "acme", provider, recipient, "--payload", payload)
    batch = home / "batch.jsonl"
    lines = [{"tenant": "acme", "provider": "bounce", "recipient": r} for r in (EMAIL, PHONE)]
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    cli.ok("enqueue", "--file", str(batch))
    batch.unlink()  # the operator's own input, not something OmniPost wrote


def _worker(url: str, home: Path) -> list[str]:
    """``omnipost worker -v`` as a process, its log on stderr; returns stdout and stderr."""
    proc = run_process(
        ["worker", "-v", "--until-empty", "--db", url], clean_env(home), timeout_s=120
    )
    assert proc.code == 0, proc.err
    assert " INFO " in proc.err, "-v logs at INFO"
    (home / "worker.log").write_text(proc.err, encoding="utf-8")
    return [proc.out, proc.err]


def _inspect(cli: Cli) -> None:
    stats = cli.json("stats")
    [acme] = stats["depth"]
    assert (acme["delivered"], acme["dead"], acme["queued"]) == (2, 3, 0), acme
    dead = cli.json("dead", "list")
    assert len(dead) == 3 and all(d["error"] for d in dead)
    cli.ok("dead", "list")
    cli.ok("stats")
    cli.ok("simulate", "acme", "audit", "--count", "3")
    for provider, recipient in (("hook", EMAIL), ("audit", PHONE)):
        cli.ok("provider", "test", provider, recipient)
    failed = cli("provider", "test", "mail", EMAIL)  # nothing listens on port 1
    assert failed.code == 1 and "via mail: unavailable (SMTPConnectError: " in failed.out, failed


@pytest.mark.slow
def test_a_full_session_leaves_no_plaintext_secret(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    server: ThreadedServer,
) -> None:
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("OMNIPOST_HOME", str(home))
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    monkeypatch.delenv("OMNIPOST_DB", raising=False)
    url = _with_password(store_url)
    delivery_file = tmp_path / "delivered.jsonl"  # outside the data directory: not scanned
    cli = Cli(capsys, url)

    _configure(cli, server, delivery_file)
    _enqueue(cli, home)
    outputs = _worker(url, home)
    _inspect(cli)

    assert EMAIL in delivery_file.read_text(encoding="utf-8"), "the session really delivered"
    assert len(server.server.requests) == 3  # the hook, the echo and the test send
    leaks = {
        "CLI output": found("".join(cli.transcript)),
        "worker process": found("".join(outputs)),
        "in-process logs": found(caplog.text),
    }
    files = [p for p in home.rglob("*") if p.is_file()]  # the key file, the worker's log
    if url.startswith("sqlite"):
        db = Path(url.removeprefix("sqlite:///"))
        files += [p for p in db.parent.iterdir() if p.name.startswith(db.name)]  # -wal, -shm
        assert db in files
    else:
        leaks["postgres rows"] = found(asyncio.run(_table_dump(url)))
    for path in files:
        leaks[str(path)] = found(path.read_bytes())
    assert {where: hits for where, hits in leaks.items() if hits} == {}


# -- error paths -----------------------------------------------------------------------------

CLOSED = f"postgresql://omni:{PG_PASSWORD}@127.0.0.1:1/omnipost"
BAD_PORT = f"postgresql://omni:{PG_PASSWORD}@127.0.0.1:x/omnipost"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["migrate", "--db", CLOSED], 1),
        (["tenant", "list", "--json", "--db", CLOSED], 1),
        (["stats", "--json", "--db", CLOSED], 1),
        (["worker", "--until-empty", "--db", CLOSED], 1),
        (["migrate", "--db", BAD_PORT], 2),
        (["tenant", "list", "-v", "--db", CLOSED], 1),
    ],
    ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else str(v),
)
def test_a_store_url_password_never_shows_in_errors(
    argv: list[str], code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(tmp_path))
        result = cli(*argv)
        assert result.code == code, result
        assert_one_sentence(result.err)
        assert found(result.out + result.err) == []
        without_db = argv[: argv.index("--db")]
        mp.setenv("OMNIPOST_DB", argv[argv.index("--db") + 1])  # the same from the environment
        again = cli(*without_db)
        assert (again.code, found(again.out + again.err)) == (code, [])


@pytest.mark.slow
def test_a_store_url_password_never_shows_in_a_process_log(tmp_path: Path) -> None:
    """As a process with -v: the connection retries are logged; the password is not."""
    proc = run_process(["tenant", "list", "-v", "--db", CLOSED], clean_env(tmp_path), timeout_s=120)
    assert proc.code == 1
    assert "Traceback" not in proc.err
    assert "cannot be reached" in proc.err.splitlines()[-1]
    assert found(proc.out + proc.err) == []


@pytest.mark.postgres
def test_a_missing_postgres_database_is_named_without_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from testkit.stores import PG_ADMIN_URL, postgres_or_skip

    postgres_or_skip()
    url = make_url(PG_ADMIN_URL).set(password=PG_PASSWORD, database="omnipost_no_such_db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(tmp_path))
        result = Cli(capsys)("tenant", "list", "--db", url.render_as_string(hide_password=False))
    assert result.code == 1, result
    assert_one_sentence(result.err)
    assert found(result.out + result.err) == []


HOOK = ["--kind", "webhook", "--option", "url=http://127.0.0.1:9/"]
SMTP = ["--kind", "smtp", "--option", "host=127.0.0.1", "--option", "from=a@example.com"]
REFUSED_CONFIGS = [
    ["--kind", "webhook", "--option", f"url=http://omni:{PG_PASSWORD}@127.0.0.1:9/"],
    [*HOOK, "--secret", f"bogus={AUTH_HEADER}"],
    [*HOOK, "--secret", f"header.Authorization={AUTH_HEADER}\n"],
    [
        *SMTP,
        "--option",
        "security=none",
        "--secret",
        "username=u",
        "--secret",
        f"password={SMTP_PASSWORD}",
    ],
    [*SMTP, "--secret", f"password={SMTP_PASSWORD}"],
    ["--kind", "simulated", "--secret", f"signing_key={SIGNING_KEY}"],
]


@pytest.mark.parametrize("flags", REFUSED_CONFIGS, ids=lambda f: f"{f[1]}-{f[-1][:12]}")
def test_a_refused_provider_never_echoes_its_secrets(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys, f"sqlite:///{tmp_path / 'omnipost.db'}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMNIPOST_HOME", str(tmp_path))
        mp.delenv("OMNIPOST_KEYS", raising=False)
        cli.ok("migrate")
        result = cli("provider", "add", "p1", *flags)
    assert result.code == 2, result
    assert_one_sentence(result.err)
    assert found(result.out + result.err) == []
