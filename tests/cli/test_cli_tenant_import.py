"""``omnipost tenant import`` and ``omnipost tenant export``, in-process, on SQLite and on
Postgres: the file is written whole or not at all, as one audit entry, and an export imports
back to the same tenants exactly."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import (
    AuditEntry,
    ConfigError,
    Limit,
    SecretBox,
    Store,
    TenantRecord,
    TenantSpec,
    parse_rate,
    parse_tenant_lines,
    rate_text,
    tenant_line,
)
from testkit.cli import Cli, assert_one_sentence


def write_lines(path: Path, *lines: str | dict[str, Any]) -> str:
    """``lines`` into ``path``, one a line (dicts as JSON); returns the path as text."""
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_text(text, encoding="utf-8")
    return str(path)


def audit(cli: Cli) -> list[AuditEntry]:
    """The store's audit log, newest first (read directly: no command lists it)."""

    async def read() -> list[AuditEntry]:
        assert cli.db_url is not None
        async with Store(cli.db_url, SecretBox([SecretBox.generate_key()])) as store:
            return await store.audit.entries(limit=1000)

    return asyncio.run(read())


def tenants(cli: Cli) -> dict[str, tuple[Any, bool]]:
    return {t["name"]: (t["limit"], t["enabled"]) for t in cli.json("tenant", "list")}


def test_import_adds_every_line_and_says_how_many(cli: Cli, tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "tenants.jsonl",
        {"name": "acme", "rate": "300/min"},  # no burst: one second's worth, as tenant add
        "",
        {"name": "globex", "rate": 2, "burst": 4, "enabled": True},
        "   ",
        {"name": "initech", "enabled": False},  # no rate: unlimited
    )
    assert cli.ok("tenant", "import", path) == "imported 3 tenants (3 added, 0 updated)\n"
    assert tenants(cli) == {
        "acme": ({"rate_per_s": 5.0, "burst": 5.0}, True),
        "globex": ({"rate_per_s": 2.0, "burst": 4.0}, True),
        "initech": (None, False),
    }


def test_import_reads_stdin_and_prints_json(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "10")
    lines = [{"name": "acme", "rate": "1/s"}, {"name": "globex"}, {"name": "hooli"}]
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    summary = cli.json("tenant", "import", "-", "--update")
    assert summary == {"imported": 3, "added": 2, "updated": 1}
    assert tenants(cli)["acme"] == ({"rate_per_s": 1.0, "burst": 1.0}, True)


@pytest.mark.slow
def test_export_then_import_update_sets_every_tenant_back_exactly(cli: Cli, tmp_path: Path) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "1000/h", "--burst", "2.5")
    cli.ok("tenant", "add", "globex", "--rate", "0.1", "--disable")
    cli.ok("tenant", "add", "initech")
    cli.ok("tenant", "add", "hooli", "--rate", "7/min", "--burst", "1e6")
    cli.ok("tenant", "add", "umbrella", "--rate", "123.456789/s", "--burst", "1.0000001")
    cli.ok("tenant", "add", "vandelay", "--rate", "0.0000003", "--disable")
    cli.ok(
        "tenant", "set", "hooli", "--api-rate", "20/s", "--api-burst", "5", "--max-queued", "900"
    )
    before = cli.json("tenant", "list")
    exported = cli.ok("tenant", "export")
    assert exported.splitlines()[0] == (
        '{"name": "acme", "rate": "1000/h", "burst": 2.5, "enabled": true}'
    )
    assert '{"name": "initech", "enabled": true}' in exported.splitlines()  # unlimited
    assert (
        '{"name": "hooli", "rate": "7/min", "burst": 1000000, "enabled": true, '
        '"api_rate": "20/s", "api_burst": 5, "max_queued": 900}'
    ) in exported.splitlines()
    saved = tmp_path / "saved.jsonl"
    assert cli.ok("tenant", "export", "--output", str(saved)) == (
        f"exported 6 tenants to {saved}\n"
    )
    assert saved.read_text(encoding="utf-8") == exported

    for name in ("acme", "globex", "initech", "hooli", "umbrella", "vandelay"):
        cli.ok("tenant", "set", name, "--rate", "3", "--burst", "9", "--enable")
        cli.ok("tenant", "set", name, "--api-rate", "1/s", "--max-queued", "3")
    assert cli.ok("tenant", "import", str(saved), "--update") == (
        "imported 6 tenants (0 added, 6 updated)\n"
    )
    assert cli.json("tenant", "list") == before
    assert cli.ok("tenant", "export") == exported


def test_an_import_is_one_audit_entry(cli: Cli, tmp_path: Path) -> None:
    cli.ok("tenant", "add", "acme")
    entries = len(audit(cli))
    lines = [{"name": "acme", "rate": "5"}] + [{"name": f"t{n}"} for n in range(40)]
    cli.ok("tenant", "import", write_lines(tmp_path / "t.jsonl", *lines), "--update")
    newest, *older = audit(cli)
    assert len(older) == entries
    assert (newest.action, newest.detail, newest.tenant_id) == (
        "tenant.import",
        {"added": 40, "updated": 1},
        None,
    )
    assert newest.actor.startswith("cli")


GOOD = {"name": "newco", "rate": "10/s", "burst": 5}

# (what line 3 holds, what the sentence says after "line 3: ")
BAD_LINES: list[tuple[str, str]] = [
    ('{"name": "x"', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('"acme"', "expected a JSON object"),
    ('{"name": "x", "rate": "5/s", "brust": 2}', "unknown field 'brust'"),
    ('{"name": "x", "rate": "fast"}', "cannot read 'fast' as a rate"),
    ('{"name": "x", "rate": "0/s"}', "rate '0/s' must be a finite number above 0"),
    ('{"name": "x", "rate": -3}', "cannot read '-3' as a rate"),
    ('{"name": "x", "rate": true}', "'rate' must be text"),
    ('{"name": "x", "rate": "5/s", "burst": 0.5}', "burst must be a finite number of at least 1"),
    ('{"name": "x", "rate": "5/s", "burst": "10"}', "'burst' must be a number"),
    ('{"name": "x", "rate": "5/s", "burst": NaN}', "not valid JSON (NaN is not JSON)"),
    ('{"name": "x", "rate": "5/s", "burst": 1e999}', "burst must be a finite number"),
    ('{"name": "x", "rate": "5/s", "burst": 1' + "0" * 400 + "}", "'burst' is too large"),
    ('{"name": "x", "burst": 4}', "'burst' needs 'rate' as well"),
    ('{"name": "x", "enabled": "yes"}', "'enabled' must be true or false"),
    ('{"rate": "5/s"}', "'name' is missing"),
    ('{"name": 7}', "'name' must be a string"),
    ('{"name": "bad name!"}', "tenant name 'bad name!' is not valid"),
    ('{"name": "-x"}', "tenant name '-x' is not valid"),
    ('{"name": "' + "n" * 64 + '"}', "tenant name '" + "n" * 40 + "...' is not valid"),
    ('{"name": "newco"}', "tenant 'newco' is on line 1 already"),
]


@pytest.mark.slow
def test_a_bad_line_names_itself_exits_2_and_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "10")
    before = cli.ok("tenant", "export")
    entries = audit(cli)
    for bad, says in BAD_LINES:
        path = write_lines(tmp_path / "bad.jsonl", GOOD, "", bad, {"name": "later"})
        for update in ([], ["--update"]):
            result = cli("tenant", "import", path, *update)
            assert result.code == 2, (bad, result)
            assert_one_sentence(result.err)
            assert result.err.startswith(f"omnipost: line 3: {says}"), (bad, result.err)
            assert result.out == ""
            assert cli.ok("tenant", "export") == before, f"{bad}: newco, line 1, was written"
    assert audit(cli) == entries


def test_an_existing_tenant_is_refused_without_update(cli: Cli, tmp_path: Path) -> None:
    cli.ok("tenant", "add", "acme", "--rate", "10")
    before = cli.ok("tenant", "export")
    path = write_lines(tmp_path / "t.jsonl", GOOD, {"name": "acme", "rate": "1/s"})
    result = cli("tenant", "import", path)
    assert result.code == 2
    assert_one_sentence(result.err)
    assert result.err == (
        "omnipost: line 2: tenant 'acme' already exists; "
        "import with --update to change existing tenants.\n"
    )
    assert cli.ok("tenant", "export") == before


def test_files_that_cannot_be_read_or_written_are_one_sentence(cli: Cli, tmp_path: Path) -> None:
    result = cli("tenant", "import", str(tmp_path / "missing.jsonl"))
    assert result.code == 2
    assert result.err.startswith(f"omnipost: cannot read {tmp_path / 'missing.jsonl'}: ")
    assert_one_sentence(result.err)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"name": "caf\xe9"}\n')
    result = cli("tenant", "import", str(tmp_path / "latin1.jsonl"))
    assert result.code == 2 and "cannot read" in result.err
    result = cli("tenant", "export", "--output", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert result.code == 2 and "cannot write" in result.err
    assert_one_sentence(result.err)


# -- the lines themselves ------------------------------------------------------------------


@given(st.floats(min_value=1e-300, max_value=1e300))
def test_every_rate_is_written_as_text_that_reads_back_exactly(per_s: float) -> None:
    assert parse_rate(rate_text(per_s)) == per_s


@pytest.mark.parametrize(
    ("per_s", "text"),
    [(5.0, "5/s"), (2.5, "150/min"), (1000 / 3600, "1000/h"), (0.1, "6/min"), (1e-7, "1e-07/s")],
)
def test_rates_are_written_in_the_plainest_unit(per_s: float, text: str) -> None:
    assert rate_text(per_s) == text


@given(
    st.one_of(
        st.none(),
        st.builds(
            Limit,
            st.floats(min_value=1e-9, max_value=1e9),
            st.floats(min_value=1, max_value=1e12),
        ),
    ),
    st.booleans(),
)
def test_a_tenant_line_reads_back_to_the_same_tenant(limit: Limit | None, enabled: bool) -> None:
    line = tenant_line(TenantRecord(1, "acme", limit, enabled))
    assert parse_tenant_lines([line]) == [TenantSpec("acme", limit, enabled, line=1)]
    api = TenantRecord(1, "acme", limit, enabled, limit, 5)  # the API's limits read back too
    assert parse_tenant_lines([tenant_line(api)]) == [
        TenantSpec("acme", limit, enabled, 1, limit, 5)
    ]


def test_numbers_of_a_line_are_what_tenant_add_takes() -> None:
    [spec] = parse_tenant_lines(['{"name": "a", "rate": 0.5}'])
    assert spec.limit == Limit(0.5, 1.0)  # burst: one second's worth, at least 1
    [spec] = parse_tenant_lines(['{"name": "a", "rate": "120/min", "burst": 3}'])
    assert spec.limit == Limit(2.0, 3.0)
    [spec] = parse_tenant_lines(['{"name": "a", "rate": null, "burst": null}'])
    assert spec.limit is None
    with pytest.raises(ConfigError, match=r"^line 1: cannot read 'inf' as a rate"):
        parse_tenant_lines(['{"name": "a", "rate": 1e999}'])  # JSON's 1e999 reads as inf
