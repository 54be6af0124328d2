"""The circuit breaker from the command line: `provider list` and `stats` show each provider's
health, `provider resume NAME` closes an open circuit, and bad names and options are one
sentence."""

from __future__ import annotations

import pytest

from testkit.cli import Cli, assert_one_sentence
from testkit.redis_server import free_port


def open_circuit(cli: Cli) -> None:
    """An SMTP provider at a closed port, one notification, a short worker run: it opens."""
    port = free_port()
    cli.ok("tenant", "add", "acme")
    cli.ok(
        "provider", "add", "mail", "--kind", "smtp",
        "--option", "host=127.0.0.1", "--option", f"port={port}",
        "--option", "security=none", "--option", "from=me@example.com",
        "--option", "circuit_failures=1", "--option", "circuit_backoff_s=600",
    )  # fmt: skip
    cli.ok("enqueue", "acme", "mail", "secret.person@example.com", "--key", "k1")
    cli.ok("worker", "--duration", "1.5", "--quiet")


@pytest.mark.slow
def test_provider_list_and_stats_show_an_open_circuit_and_resume_closes_it(cli: Cli) -> None:
    open_circuit(cli)
    [listed] = cli.json("provider", "list")
    health = listed["health"]
    assert (health["state"], health["failures"]) == ("open", 1)
    assert "ConnectionRefused" in health["last_error"] or "Connect" in health["last_error"]
    assert health["next_probe_at"] > health["since"]
    text = cli.ok("provider", "list")
    assert "CIRCUIT" in text and "open (probe in 5" in text  # of circuit_backoff_s=600

    stats = cli.json("stats")
    assert [(h["provider"], h["state"]) for h in stats["health"]] == [("mail", "open")]
    assert stats["depth"][0]["queued"] == 1 and stats["depth"][0]["dead"] == 0
    assert "open (probe in" in cli.ok("stats")

    out = cli.ok("provider", "resume", "mail")
    assert out == "provider mail: circuit closed (was open); its notifications go out again\n"
    [listed] = cli.json("provider", "list")
    assert listed["health"]["state"] == "closed"
    assert cli.json("stats")["health"][0]["state"] == "closed"
    assert all("secret.person" not in text for text in cli.transcript)


def test_a_healthy_provider_lists_as_closed(cli: Cli) -> None:
    cli.ok("provider", "add", "sms", "--kind", "simulated")
    [listed] = cli.json("provider", "list")
    assert listed["health"] == {
        "provider": "sms",
        "state": "closed",
        "since": None,
        "last_error": "",
        "next_probe_at": None,
        "failures": 0,
    }
    assert cli.ok("provider", "resume", "sms").startswith(
        "provider sms: circuit closed (was closed)"
    )


def test_resuming_an_unknown_provider_is_one_sentence(cli: Cli) -> None:
    result = cli("provider", "resume", "nope")
    assert result.code == 2
    assert_one_sentence(result.err)
    assert "no provider named 'nope'" in result.err


def test_a_bad_circuit_option_is_one_sentence(cli: Cli) -> None:
    result = cli("provider", "add", "sms", "--kind", "simulated", "--option", "circuit_failures=0")
    assert result.code == 2
    assert_one_sentence(result.err)
    assert "'circuit_failures' must be a whole number from 1 to 1000" in result.err
