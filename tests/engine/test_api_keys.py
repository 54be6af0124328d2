"""Tenant API keys: made once, kept as a hash, listed without the key, checked in constant time,
revoked for good; on SQLite and on Postgres, through the engine and through the CLI."""

from __future__ import annotations

import json
import re

import pytest
import sqlalchemy as sa

from engine import ApiKeyRecord, ConfigError, Conflict, NotFound, Store
from engine.store.schema import api_keys, audit_log
from testkit.cli import Cli, assert_one_sentence
from testkit.stores import EngineFactory

KEY = re.compile(r"op_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


async def _rows(store: Store, table: sa.Table) -> list[str]:
    """Every row of ``table`` as text, read straight from the database."""
    engine = store._db.engine  # the test reads what is at rest, past the repositories

    async with engine.connect() as conn:
        return [repr(tuple(row)) for row in await conn.execute(sa.select(table))]


async def test_a_key_is_shown_once_and_kept_as_a_hash(
    make_engine: EngineFactory, store: Store
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    record, key = await engine.api_key_create("acme", name="billing", scope=["send"])
    assert KEY.fullmatch(key), key
    assert key.startswith(record.prefix + "_")
    assert (record.tenant, record.name, record.scope) == ("acme", "billing", ("send",))
    assert record.revoked_at is None and record.last_used_at is None
    secret = key.split("_", 2)[2]
    at_rest = await _rows(store, api_keys) + await _rows(store, audit_log)
    assert not [row for row in at_rest if secret in row]  # neither the key nor its secret
    [entry] = [e for e in await engine.audit_entries() if e.action == "apikey.create"]
    assert entry.detail == {
        "id": record.id,
        "prefix": record.prefix,
        "name": "billing",
        "scope": "send",
    }
    assert await engine.api_keys("acme") == [record]


async def test_checking_a_key(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    record, key = await engine.api_key_create("acme")
    found = await engine.api_key_check(key)
    assert found is not None and found.id == record.id and found.scope == ("send", "read")
    [listed] = await engine.api_keys()
    assert listed.last_used_at is not None  # its use is recorded
    assert await engine.api_key_check(key) is not None  # again at once: not written again
    [again] = await engine.api_keys()
    assert again.last_used_at == listed.last_used_at
    wrong_secret = key[:-1] + ("A" if key[-1] != "A" else "B")
    other_prefix = "op_000000000000" + key[15:]
    for bad in (wrong_secret, other_prefix, key + "x", "", "Bearer " + key, key.upper()):
        assert await engine.api_key_check(bad) is None, bad
    await engine.api_key_revoke(record.id)
    assert await engine.api_key_check(key) is None  # revoked: the same answer as unknown


async def test_each_tenant_sees_its_own_keys(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    for tenant in ("acme", "globex"):
        await engine.tenant_add(tenant)
    mine, _ = await engine.api_key_create("acme")
    theirs, _ = await engine.api_key_create("globex", scope=("read",))
    assert await engine.api_keys("acme") == [mine]
    assert await engine.api_keys("globex") == [theirs]
    assert [r.id for r in await engine.api_keys()] == [mine.id, theirs.id]


async def test_bad_input_changes_nothing(make_engine: EngineFactory) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        await engine.api_key_create("nobody")
    with pytest.raises(ConfigError, match="unknown scope 'write'"):
        await engine.api_key_create("acme", scope=["write"])
    for nothing in ([], [""], [" ", ""]):
        with pytest.raises(ConfigError, match="give a scope"):
            await engine.api_key_create("acme", scope=nothing)
    with pytest.raises(ConfigError, match="at most 100"):
        await engine.api_key_create("acme", name="x" * 101)
    with pytest.raises(NotFound, match="no tenant named 'nobody'"):
        await engine.api_keys("nobody")
    with pytest.raises(NotFound, match="no api key 7"):
        await engine.api_key_revoke(7)
    assert await engine.api_keys() == []
    record, _ = await engine.api_key_create("acme")
    revoked = await engine.api_key_revoke(record.id)
    assert revoked.revoked_at is not None
    with pytest.raises(Conflict, match="already revoked"):
        await engine.api_key_revoke(record.id)
    assert [e.action for e in await engine.audit_entries()][:2] == [
        "apikey.revoke",
        "apikey.create",
    ]


def test_the_cli_makes_lists_and_revokes(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    made = cli.json("apikey", "create", "acme", "--name", "billing", "--scope", "send")
    assert set(made) == {"id", "prefix", "key", "tenant", "scope", "name"}
    assert KEY.fullmatch(made["key"]) and made["scope"] == ["send"] and made["tenant"] == "acme"
    text = cli.ok("apikey", "create", "acme")
    [shown] = KEY.findall(text)
    assert "shown this once" in text
    listing = cli.ok("apikey", "list") + json.dumps(cli.json("apikey", "list", "acme"))
    assert made["prefix"] in listing and "billing" in listing
    assert made["key"] not in listing and shown not in listing
    assert cli.ok("apikey", "revoke", str(made["id"])) == (
        f"api key {made['id']} ({made['prefix']}) of acme revoked\n"
    )
    [first] = [k for k in cli.json("apikey", "list") if k["id"] == made["id"]]
    assert first["revoked_at"] is not None
    for args, says in (
        (["apikey", "create", "acme", "--scope", "write"], "unknown scope 'write'"),
        (["apikey", "create", "acme", "--scope", ""], "give a scope"),
        (["apikey", "create", "nobody"], "no tenant named 'nobody'"),
        (["apikey", "revoke", "99"], "no api key 99"),
        (["apikey", "revoke", str(made["id"])], "already revoked"),
        (["apikey", "list", "nobody"], "no tenant named 'nobody'"),
    ):
        result = cli(*args)
        assert result.code == 2 and says in result.err, (args, result)
        assert_one_sentence(result.err)
    assert len(cli.json("apikey", "list")) == 2  # the refusals made nothing


def test_record_has_no_field_for_the_key() -> None:
    assert "key" not in ApiKeyRecord.__dataclass_fields__
    assert "digest" not in ApiKeyRecord.__dataclass_fields__
