"""Key rotation: ``omnipost keys new`` and ``omnipost keys rotate``, on SQLite and on Postgres.

A store is filled under an OLD key, rotated with ``OMNIPOST_KEYS=NEW,OLD``, and then read and
drained with NEW alone. Tokens are read straight from the database to see which key wrote them.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import create_async_engine

from app.paths import Paths, load_box
from engine import (
    BUILTIN_KINDS,
    Engine,
    Limit,
    LocalLimiter,
    OmniPostError,
    RotationProgress,
    SecretBox,
    Store,
    SystemClock,
)
from engine.store import normalize_url
from testkit.cli import Cli, assert_one_sentence, file_run
from testkit.support import (
    assert_each_key_once,
    enqueue_numbered,
    eventually,
    new_notification,
    read_lines,
)

OLD, NEW, THIRD = (SecretBox.generate_key() for _ in range(3))
SECRET = "hunter2-SECRET"


def sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """One statement on the store behind the engine's back; its rows, if any."""

    async def run() -> list[tuple[Any, ...]]:
        engine = create_async_engine(normalize_url(url))
        try:
            async with engine.begin() as conn:
                result = await conn.execute(sa.text(statement), params)
                return [tuple(row) for row in result] if result.returns_rows else []
        finally:
            await engine.dispose()

    return asyncio.run(run())


async def tokens_of(url: str) -> dict[str, str]:
    """Every stored token by row: ``n<id>`` for a notification, ``p<name>`` for a provider."""
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            found = {
                f"n{i}": t
                for i, t in await conn.execute(sa.text("SELECT id, recipient FROM notifications"))
            }
            query = sa.text("SELECT name, secrets FROM providers WHERE secrets IS NOT NULL")
            found.update({f"p{n}": t for n, t in await conn.execute(query)})
    finally:
        await engine.dispose()
    return found


def tokens(url: str) -> dict[str, str]:
    return asyncio.run(tokens_of(url))


def written_by(found: dict[str, str], key: str) -> set[str]:
    """The rows whose token ``key`` alone reads, in the current format or the Fernet one."""
    box = SecretBox([key])
    rows = set()
    for row, token in found.items():
        try:
            box.decrypt(token)
        except OmniPostError:  # another key wrote it
            continue
        rows.add(row)
    return rows


def current_under(found: dict[str, str], key: str) -> set[str]:
    """The rows whose token ``key`` wrote in the current format (``rotate`` leaves them)."""
    box = SecretBox([key])
    return {row for row, token in found.items() if box.is_current(token)}


def use_keys(monkeypatch: pytest.MonkeyPatch, *keys: str) -> None:
    monkeypatch.setenv("OMNIPOST_KEYS", ",".join(keys))


def add_hook(cli: Cli) -> None:
    """A webhook provider with a secret (never called here)."""
    cli.ok(
        "provider", "add", "hook", "--kind", "webhook", "--option", "url=http://127.0.0.1:9/h",
        "--secret", f"signing_key={SECRET}",
    )  # fmt: skip


# -- omnipost keys new ------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("OMNIPOST_HOME", str(folder))
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    monkeypatch.delenv("OMNIPOST_DB", raising=False)
    return folder


def test_keys_new_prints_one_fresh_key_and_touches_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys)
    first, second = cli.ok("keys", "new"), cli.ok("keys", "new")
    for out in (first, second):
        assert out.endswith("\n") and out.count("\n") == 1
        Fernet(out.strip())  # raises unless a valid key
    assert first != second
    assert not home.exists()  # no key file, no store, not even the data directory


def test_keys_new_add_puts_the_key_first_in_the_key_file(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = Paths.from_env()
    assert load_box(paths).key_count == 1  # the key file a first run makes
    held = paths.key_file.read_text().split()
    cli = Cli(capsys)
    out = cli.ok("keys", "new", "--add")
    assert str(paths.key_file) in out and "2 keys" in out
    keys = paths.key_file.read_text().split()
    assert keys[1:] == held and len(keys) == 2
    Fernet(keys[0])
    assert keys[0] not in "".join(cli.transcript)  # the key stays in the file
    assert stat.S_IMODE(os.stat(paths.key_file).st_mode) == 0o600
    box = load_box(paths)
    assert box.key_count == 2 and box.source == f"the key file {paths.key_file}"

    use_keys(monkeypatch, OLD)
    result = cli("keys", "new", "--add")
    assert result.code == 2 and "OMNIPOST_KEYS is set" in result.err
    assert_one_sentence(result.err)
    assert paths.key_file.read_text().split() == keys


# -- omnipost keys rotate ---------------------------------------------------------------------


@pytest.mark.slow
def test_after_rotation_the_new_key_alone_reads_and_delivers_everything(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.db_url is not None
    url = cli.db_url
    use_keys(monkeypatch, OLD)
    delivered = [f"k{n}" for n in range(6)]
    out = file_run(cli, tmp_path, delivered, rate="1000", burst="1000")
    add_hook(cli)
    cli.ok("worker", "--until-empty", "--quiet")
    queued = [f"q{n}" for n in range(6)]
    for key in queued:
        cli.ok("enqueue", "acme", "audit", f"{key}@example.com", "--key", key)
    sql(
        url, "UPDATE notifications SET state = 'dead', finished_at = 1 WHERE idempotency_key = 'q5'"
    )
    before = tokens(url)
    assert len(before) == 13 and written_by(before, OLD) == set(before)

    use_keys(monkeypatch, NEW, OLD)
    dry = cli.json("keys", "rotate", "--dry-run")
    assert dry["dry_run"] is True and dry["rewritten"] == 13 and dry["unreadable"] == 0
    assert dry["tables"]["notifications"] == {"checked": 12, "rewritten": 12, "unreadable": 0}
    assert dry["tables"]["providers"] == {"checked": 1, "rewritten": 1, "unreadable": 0}
    assert tokens(url) == before  # a dry run writes nothing

    text = cli.ok("keys", "rotate")
    assert "the 2 keys in OMNIPOST_KEYS" in text
    assert [line.split() for line in text.splitlines()[1:4]] == [
        ["TABLE", "ROWS", "REWRITTEN", "UNREADABLE"],
        ["notifications", "12", "12", "0"],
        ["providers", "1", "1", "0"],
    ]
    after = tokens(url)
    assert after.keys() == before.keys()
    assert written_by(after, NEW) == set(after) and not written_by(after, OLD)
    assert current_under(after, NEW) == set(after)
    assert cli.json("keys", "rotate")["rewritten"] == 0  # nothing left to do
    assert tokens(url) == after

    use_keys(monkeypatch, NEW)  # the old key retired
    assert "every secret is under the newest key." in cli.ok("keys", "rotate", "--dry-run")
    [hook] = [p for p in cli.json("provider", "list") if p["name"] == "hook"]
    assert "signing_key" in str(hook)
    [dead] = cli.json("dead", "list")
    assert dead["key"] == "q5" and dead["recipient"] == "q***@e***.com"
    cli.ok("worker", "--until-empty", "--quiet")
    lines = read_lines(out)
    assert_each_key_once(lines, delivered + queued[:5])
    recipients = {line["idempotency_key"]: line["recipient"] for line in lines}
    expected = {k: f"u{n}@example.com" for n, k in enumerate(delivered)}
    expected |= {k: f"{k}@example.com" for k in queued[:5]}
    assert recipients == expected

    audited = sql(url, "SELECT actor, detail FROM audit_log WHERE action = 'keys.rotate'")
    assert len(audited) == 2  # both runs that were not dry
    assert all(actor.startswith("cli:") for actor, _ in audited)
    assert sorted('"notifications": 12' in detail for _, detail in audited) == [False, True]
    everything = "".join(cli.transcript)
    assert SECRET not in everything and "u1@example.com" not in everything
    assert NEW not in everything and OLD not in everything


def test_rotation_rewrites_fernet_tokens_of_an_older_store_under_the_same_key(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store from before the current format holds Fernet tokens: read as they are, and
    ``keys rotate`` rewrites them in the current format, even under the one key it has."""
    assert cli.db_url is not None
    url = cli.db_url
    use_keys(monkeypatch, OLD)
    out = file_run(cli, tmp_path, ["a"], rate="1000", burst="1000")
    for key in ("b", "c"):
        cli.ok("enqueue", "acme", "audit", f"{key}@example.com", "--key", key)
    fernet = Fernet(OLD)
    for key in ("b", "c"):  # as the Fernet format wrote them
        token = fernet.encrypt(f"{key}@example.com".encode()).decode()
        sql(
            url,
            "UPDATE notifications SET recipient = :t WHERE idempotency_key = :k",
            t=token,
            k=key,
        )
    before = tokens(url)
    assert len(current_under(before, OLD)) == 1  # a's, written in the current format

    assert cli.json("keys", "rotate", "--dry-run")["rewritten"] == 2
    assert "2 secrets under an older key or in the older (Fernet) format" in cli.ok(
        "keys", "rotate", "--dry-run"
    )
    assert cli.json("keys", "rotate")["rewritten"] == 2
    after = tokens(url)
    assert current_under(after, OLD) == set(after)
    assert cli.json("keys", "rotate")["rewritten"] == 0
    cli.ok("worker", "--until-empty", "--quiet")
    recipients = {line["idempotency_key"]: line["recipient"] for line in read_lines(out)}
    assert recipients == {"a": "u0@example.com", "b": "b@example.com", "c": "c@example.com"}


def test_a_row_no_key_reads_is_named_and_nothing_is_rewritten(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.db_url is not None
    url = cli.db_url
    use_keys(monkeypatch, OLD)
    file_run(cli, tmp_path, ["a", "b", "c"], rate="1000", burst="1000")
    use_keys(monkeypatch, THIRD)  # some process wrote with a key the rotator is not given
    cli.ok("enqueue", "acme", "audit", "x@example.com", "--key", "x")
    add_hook(cli)
    [(third_id,)] = sql(url, "SELECT id FROM notifications WHERE idempotency_key = 'x'")
    before = tokens(url)

    use_keys(monkeypatch, NEW, OLD)
    dry = cli("keys", "rotate", "--dry-run")
    assert dry.code == 1
    assert [line.split() for line in dry.out.splitlines()[2:4]] == [
        ["notifications", "4", "3", "1"],
        ["providers", "1", "0", "1"],
    ]
    assert_one_sentence(dry.err)
    assert f"notification {third_id} (tenant acme) and 1 other row cannot be read" in dry.err
    assert "any of the 2 keys in OMNIPOST_KEYS" in dry.err

    result = cli("keys", "rotate")
    assert result.code == 1 and result.out == ""
    assert_one_sentence(result.err)
    assert f"notification {third_id} (tenant acme)" in result.err
    assert "nothing was rewritten" in result.err
    assert tokens(url) == before

    use_keys(monkeypatch, NEW, OLD, THIRD)
    assert cli.json("keys", "rotate")["rewritten"] == 5
    assert written_by(tokens(url), NEW) == set(before)
    assert SECRET not in "".join(cli.transcript)


def test_an_unreadable_provider_secret_is_named(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_keys(monkeypatch, THIRD)
    add_hook(cli)
    use_keys(monkeypatch, NEW)
    result = cli("keys", "rotate")
    assert result.code == 1
    assert_one_sentence(result.err)
    assert "the secrets of provider hook cannot be read with the 1 key in OMNIPOST_KEYS" in (
        result.err
    )


# -- the engine's walk: batches, interruption, workers ----------------------------------------


async def filled(url: str, n: int, out: Path, *, limit: Limit | None = None) -> None:
    """A migrated store with tenant ``acme``, a ``file`` provider ``f`` writing to ``out`` and
    ``n`` notifications, all under OLD."""
    async with Store(url, SecretBox([OLD])) as store:
        await store.migrate()
        async with Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
            await engine.tenant_add("acme", limit)
            await engine.provider_add("f", "file", options={"path": str(out)})
            await enqueue_numbered(engine, "acme", "f", n)


async def rotate(url: str, keys: list[str], **kwargs: Any) -> Any:
    async with Store(url, SecretBox(keys)) as store:
        engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS)
        try:
            return await engine.keys_rotate(**kwargs)
        finally:
            await engine.close()


async def test_an_interrupted_rotation_completes_when_run_again(
    store_url: str, tmp_path: Path
) -> None:
    await filled(store_url, 20, tmp_path / "out.jsonl")

    def cancel_after_first_batch(step: RotationProgress) -> None:
        if step.phase == "rewrite":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # as Ctrl+C does: the next await is cancelled

    with pytest.raises(asyncio.CancelledError):
        await rotate(store_url, [NEW, OLD], batch=3, progress=cancel_after_first_batch)
    found = await tokens_of(store_url)
    assert len(written_by(found, NEW)) == 3  # the first batch, whole; none of the next
    assert written_by(found, OLD) == set(found) - written_by(found, NEW)

    report = await rotate(store_url, [NEW, OLD], batch=3)
    assert report.rewritten == 17 and report.problem is None
    assert (await rotate(store_url, [NEW, OLD], batch=3)).rewritten == 0
    found = await tokens_of(store_url)
    assert written_by(found, NEW) == set(found)


async def test_a_batch_with_an_unreadable_row_is_not_written(store_url: str) -> None:
    """The rewrite's own guard, for a row that appears after the check: its batch stays as it
    was, the batches before it are done."""
    async with Store(store_url, SecretBox([OLD])) as store:
        await store.migrate()
        tenant = await store.config.tenant_add("acme", None, now=1.0, actor="t")
        provider = await store.config.provider_add("f", "file", None, {}, {}, now=1.0, actor="t")
    order = [OLD, OLD, OLD, THIRD, OLD, OLD]
    for n, key in enumerate(order):
        async with Store(store_url, SecretBox([key])) as store:
            item = new_notification(provider.id, f"k{n}")
            await store.queue.enqueue(tenant.id, [item], now=1.0)
    async with Store(store_url, SecretBox([NEW, OLD])) as store:
        with pytest.raises(OmniPostError) as caught:
            await store.rotation.batched(2).walk(rewrite=True)
    assert "notification 4 (tenant acme) cannot be read" in caught.value.message
    assert "rows before it are already under the newest key" in caught.value.message
    found = await tokens_of(store_url)
    assert written_by(found, NEW) == {"n1", "n2"}
    assert written_by(found, OLD) == {"n3", "n5", "n6"}
    assert written_by(found, THIRD) == {"n4"}


@pytest.mark.slow
async def test_rotating_while_a_worker_drains_loses_nothing(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    n = 80
    # Rate-limited, so the drain lasts about eight seconds and the rotation (a few dozen short
    # transactions) runs well inside it, even on a loaded machine.
    await filled(store_url, n, out, limit=Limit(10.0, 5.0))
    async with (
        Store(store_url, SecretBox([NEW, OLD])) as store,
        Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS) as worker,
    ):
        await worker.start()
        await eventually(lambda: len(read_lines(out)) > 0, what="a first delivery")
        report = await rotate(store_url, [NEW, OLD], batch=10)
        assert report.rewritten == n and report.problem is None
        # Rows leased, delivered and queued while it ran were all rewritten in place.
        assert len(read_lines(out)) < n, "the drain ended before the rotation; slow it down"
        assert await worker.run_until_empty(timeout_s=60)
        await worker.stop()
    lines = read_lines(out)
    assert_each_key_once(lines, [f"acme-{i}" for i in range(n)])
    assert all(line["recipient"] == f"user{line['payload']['i']}@acme.example" for line in lines)
    check = await rotate(store_url, [NEW], dry_run=True)
    assert check.unreadable == 0 and check.rewritten == 0 and check.checked == n


async def test_two_rotations_at_once_rewrite_each_row_once(store_url: str, tmp_path: Path) -> None:
    """The compare-and-set: a row the other rotation rewrote first is left alone, not counted."""
    await filled(store_url, 60, tmp_path / "out.jsonl")
    first, second = await asyncio.gather(
        rotate(store_url, [NEW, OLD], batch=4), rotate(store_url, [NEW, OLD], batch=4)
    )
    assert first.rewritten + second.rewritten == 60
    found = await tokens_of(store_url)
    assert written_by(found, NEW) == set(found)
