"""``omnipost enqueue --at/--in --expires-at/--ttl``, the same in ``--file`` lines, and ``tenant
set --default-ttl`` (issue 47): what is kept, what is said, and bad times refused in one
sentence with nothing written."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from testkit.cli import Cli, assert_one_sentence


def _set_up(cli: Cli) -> None:
    cli.ok("tenant", "add", "acme")
    cli.ok("provider", "add", "sim", "--kind", "simulated")


def _depth(cli: Cli) -> dict[str, int]:
    [row] = cli.json("stats")["depth"]
    return {k: v for k, v in row.items() if isinstance(v, int)}


def test_enqueue_at_a_time_in_a_while_and_with_a_deadline(cli: Cli) -> None:
    _set_up(cli)
    said = cli.ok("enqueue", "acme", "sim", "a@example.com", "--in", "10m", "--ttl", "5m")
    found = re.fullmatch(r"scheduled as (\d+) for (\S+Z) \(key \w+\), expires (\S+Z)\n", said)
    assert found, said
    at = time.mktime(time.strptime(found[2], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(at - (time.time() + 600)) < 5
    until = time.mktime(time.strptime(found[3], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(until - at - 300) <= 1
    said = cli.ok("enqueue", "acme", "sim", "b@example.com", "--at", "2020-01-01T09:00:00+01:00")
    assert said.startswith("queued as ")  # a time passed: now
    said = cli.ok("enqueue", "acme", "sim", "c@example.com", "--expires-at", "2999-01-01T00:00Z")
    assert said.endswith("expires 2999-01-01T00:00:00Z\n")
    depth = _depth(cli)
    assert (depth["scheduled"], depth["queued"]) == (1, 2)


def test_bad_times_are_one_sentence_and_nothing_is_written(cli: Cli) -> None:
    _set_up(cli)
    for args, words in [
        (["--at", "2030-01-01T09:00:00"], "has no offset"),
        (["--at", "tomorrow"], "RFC 3339"),
        (["--in", "soon"], "--in"),
        (["--ttl", "0"], "--ttl"),
        (["--in", "40d"], "35 days"),
        (["--in", "1h", "--expires-at", "2020-01-01T00:00:00Z"], "must come after the send time"),
    ]:
        result = cli("enqueue", "acme", "sim", "a@example.com", *args)
        assert result.code == 2, (args, result.err)
        assert_one_sentence(result.err)
        assert words in result.err, (args, result.err)
    both = cli("enqueue", "acme", "sim", "a@example.com", "--at", "2030-01-01T00:00Z", "--in", "1m")
    assert both.code == 2 and "not allowed with" in both.err
    assert cli.json("stats")["depth"] == []


def test_file_lines_carry_their_times_and_a_bad_one_names_its_line(
    cli: Cli, tmp_path: Path
) -> None:
    _set_up(cli)
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    lines = [
        {"tenant": "acme", "provider": "sim", "recipient": "a@x.test", "send_at": later},
        {"tenant": "acme", "provider": "sim", "recipient": "b@x.test", "ttl_s": 60},
        {"tenant": "acme", "provider": "sim", "recipient": "c@x.test"},
    ]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.ok("enqueue", "--file", str(good)) == (
        "queued 3 (1 of them scheduled), already queued 0\n"
    )
    bad_lines = [
        {"tenant": "acme", "provider": "sim", "recipient": "d@x.test"},
        {"tenant": "acme", "provider": "sim", "recipient": "e@x.test", "expires_at": "2000-01-01Z"},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(line) + "\n" for line in bad_lines))
    result = cli("enqueue", "--file", str(bad))
    assert result.code == 2
    assert_one_sentence(result.err)
    assert "line 2" in result.err
    depth = _depth(cli)
    assert (depth["scheduled"], depth["queued"]) == (1, 2)  # nothing of the bad file


def test_a_tenants_default_ttl(cli: Cli) -> None:
    _set_up(cli)
    assert cli.ok("tenant", "set", "acme", "--default-ttl", "5m") == (
        "tenant acme: unlimited, enabled; default TTL 300 s\n"
    )
    said = cli.ok("enqueue", "acme", "sim", "a@example.com")
    assert ", expires " in said
    [tenant] = cli.json("tenant", "list")
    assert tenant["default_ttl_s"] == 300
    assert cli.ok("tenant", "set", "acme", "--default-ttl", "none").endswith(
        "; no default TTL of its own\n"
    )
    bad = cli("tenant", "set", "acme", "--default-ttl", "forever")
    assert bad.code == 2 and "--default-ttl" in bad.err
