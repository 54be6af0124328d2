"""``omnipost suppression list|add|remove`` and what ``enqueue`` says of a suppressed recipient,
on both stores: recipients are masked in every output, bad input is one sentence and changes
nothing, and the store keeps no recipient in the clear."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from testkit.cli import Cli, assert_one_sentence, sql

PHONE = "+15557654321"
OTHER = "+15550009999"


@pytest.fixture
def setup(cli: Cli) -> Cli:
    cli.ok("tenant", "add", "acme")
    cli.ok("tenant", "add", "beta")
    cli.ok("provider", "add", "sms", "--kind", "simulated")
    cli.ok("provider", "add", "mail", "--kind", "simulated")
    return cli


def test_add_list_enqueue_remove(setup: Cli, tmp_path: Path) -> None:
    cli = setup
    out = cli.ok("suppression", "add", "acme", "sms", PHONE, "--reason", "replied STOP elsewhere")
    assert out == "suppressed 1 recipient of acme for sms\n"
    listed = cli.json("suppression", "list", "acme")
    assert [(e["provider"], e["source"], e["reason"]) for e in listed] == [
        ("sms", "operator", "replied STOP elsewhere")
    ]
    assert listed[0]["recipient_masked"] == "+1********21"
    text = cli.ok("suppression", "list", "acme")
    assert text.splitlines()[0].split() == [
        "ID", "PROVIDER", "RECIPIENT", "SOURCE", "ADDED", "NOTIFICATION", "REASON"
    ]  # fmt: skip
    out = cli.ok("enqueue", "acme", "sms", PHONE, "--key", "k1")
    assert out.startswith("suppressed as ") and "acme's suppression list for sms" in out
    assert cli.ok("enqueue", "acme", "mail", PHONE, "--key", "k2").startswith("queued as ")
    assert cli.ok("enqueue", "beta", "sms", PHONE, "--key", "k3").startswith("queued as ")
    stats = cli.json("stats")
    assert stats["queue"]["suppressed"] == 1
    assert {d["tenant"]: d["suppressed"] for d in stats["depth"]} == {"acme": 1, "beta": 0}

    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        f'{{"tenant": "acme", "provider": "sms", "recipient": "{PHONE}", "key": "b1"}}\n'
        f'{{"tenant": "acme", "provider": "sms", "recipient": "{OTHER}", "key": "b2"}}\n'
    )
    out = cli.ok("enqueue", "--file", str(batch))
    assert out == "queued 1, already queued 0, suppressed 1 (on a suppression list; not sent)\n"

    assert cli.ok("suppression", "remove", "acme", "sms", PHONE) == (
        "removed the recipient from acme's suppression list for sms\n"
    )
    assert cli.json("suppression", "list", "acme") == []
    assert cli.ok("enqueue", "acme", "sms", PHONE, "--key", "k4").startswith("queued as ")
    # Listed again: what was queued to it meanwhile is suppressed too, and says so.
    assert cli.ok("suppression", "add", "acme", "sms", PHONE) == (
        "suppressed 1 recipient of acme for sms\n1 notification queued to them will not be sent\n"
    )
    assert cli.json("stats")["queue"]["suppressed"] == 3
    assert not any(PHONE in line for line in cli.transcript)


@pytest.mark.slow
def test_add_from_a_file_and_from_stdin_and_page_the_list(
    setup: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = setup
    listing = tmp_path / "bounces.txt"
    listing.write_text("a@example.com\n\nb@example.com\n  a@example.com  \n")
    out = cli.ok("suppression", "add", "acme", "mail", "--file", str(listing))
    assert out == "suppressed 2 recipients of acme for mail\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("b@example.com\nc@example.com\n"))
    out = cli.ok("suppression", "add", "acme", "mail", "d@example.com", "--file", "-")
    assert out == "suppressed 2 recipients of acme for mail (1 already were)\n"
    first = cli.json("suppression", "list", "acme", "--limit", "3")
    assert len(first) == 3
    assert f"more: --before {first[-1]['id']}" in cli.ok(
        "suppression", "list", "acme", "--limit", "3"
    )
    rest = cli.json("suppression", "list", "acme", "--before", str(first[-1]["id"]))
    assert len(rest) == 1 and rest[0]["id"] < first[-1]["id"]
    assert cli.json("suppression", "list", "acme", "--provider", "sms") == []
    assert cli.json("suppression", "list", "beta") == []
    # By id, as listed: another tenant's ids are not its own.
    ids = [str(e["id"]) for e in first[:2]]
    result = cli("suppression", "remove", "beta", "--id", ids[0])
    assert (result.code, result.out) == (1, "removed 0 of 1 entries from beta's suppression list\n")
    out = cli.ok("suppression", "remove", "acme", "--id", ids[0], "--id", ids[1])
    assert out == "removed 2 of 2 entries from acme's suppression list\n"
    assert len(cli.json("suppression", "list", "acme")) == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["suppression", "add", "nobody", "sms", PHONE], "no tenant named 'nobody'"),
        (["suppression", "add", "acme", "nope", PHONE], "no provider named 'nope'"),
        (["suppression", "add", "acme", "sms"], "give a recipient"),
        (["suppression", "add", "acme", "sms", PHONE, ""], "must not be empty"),
        (["suppression", "add", "acme", "sms", PHONE, "--reason", "a\nb"], "one printable line"),
        (["suppression", "add", "acme", "sms", "--file", "/no/such/file"], "cannot read"),
        (["suppression", "remove", "acme", "sms", OTHER], "not on the tenant's suppression list"),
        (["suppression", "remove", "beta", "sms", PHONE], "not on the tenant's suppression list"),
        (["suppression", "list", "acme", "--limit", "0"], "the limit must be 1 to 1000"),
        (["suppression", "list", "acme", "--limit", "x"], "invalid int value"),
        (["suppression", "list"], "the following arguments are required"),
        (["suppression", "remove", "acme", "sms"], "give PROVIDER RECIPIENT, or --id"),
        (["suppression", "remove", "acme", "sms", PHONE, "--id", "1"], "not both"),
    ],
)
def test_bad_input_is_one_sentence_and_changes_nothing(
    setup: Cli, args: list[str], says: str
) -> None:
    cli = setup
    cli.ok("suppression", "add", "acme", "sms", PHONE)
    before = cli.json("suppression", "list", "acme")
    result = cli(*args)
    assert result.code == 2, result
    assert says in result.err, result.err
    assert_one_sentence(result.err)
    assert cli.json("suppression", "list", "acme") == before


def test_the_store_keeps_no_recipient_in_the_clear(setup: Cli) -> None:
    cli = setup
    cli.ok("suppression", "add", "acme", "sms", PHONE, "--reason", "imported")
    assert cli.db_url is not None
    rows = sql(cli.db_url, "SELECT * FROM suppressions")
    audit = [detail for (detail,) in sql(cli.db_url, "SELECT detail FROM audit_log")]
    assert len(rows) == 1
    assert not any(PHONE in str(value) for value in rows[0])
    assert not any(PHONE in detail for detail in audit)
