"""``omnipost webhook``: a tenant's endpoints for status events from the command line, on both
stores: add (the secret printed once, encrypted at rest), list, test against a loopback
receiver (verified with ``standardwebhooks``), rotate-secret, disable and enable, events,
replay, remove; bad input is one sentence and exit 2."""

from __future__ import annotations

import json

import pytest
from standardwebhooks.webhooks import Webhook

from testkit.cli import Cli, sql
from testkit.servers import Reply, ThreadedServer


@pytest.fixture
def acme(cli: Cli) -> Cli:
    cli.ok("tenant", "add", "acme")
    return cli


def test_add_list_test_rotate_and_remove(acme: Cli, store_url: str) -> None:
    with ThreadedServer({"/hook": [Reply(204)], "/down": [Reply(503)]}) as server:
        made = acme.json("webhook", "add", "acme", server.url("/hook"), "--allow-private")
        secret = made["secret"]
        assert secret.startswith("whsec_") and made["events"][0] == "notification.delivered"
        [(stored,)] = sql(store_url, "SELECT secret FROM event_endpoints")
        assert secret not in stored and secret.removeprefix("whsec_") not in stored
        listed = acme.ok("webhook", "list", "acme")
        assert server.url("/hook") in listed and "enabled" in listed and secret not in listed
        assert acme.ok("webhook", "test", "acme", str(made["id"])).strip() == (
            f"webhook {made['id']} answered 204"
        )
        down = acme.json("webhook", "add", "acme", server.url("/down"), "--allow-private")
        failed = acme("webhook", "test", "acme", str(down["id"]))
        assert failed.code == 1 and "answered 503" in failed.out
        rotated = acme.json("webhook", "rotate-secret", "acme", str(made["id"]))
        assert rotated["secret"] != secret
        acme.ok("webhook", "test", "acme", str(made["id"]))
        acme.ok("webhook", "disable", "acme", str(made["id"]))
        assert "disabled: disabled by an operator" in acme.ok("webhook", "list", "acme")
        assert "was disabled" in acme.ok("webhook", "disable", "acme", str(made["id"]))
        acme.ok("webhook", "enable", "acme", str(made["id"]))
        acme.ok("webhook", "remove", "acme", str(down["id"]))
        assert [h["id"] for h in acme.json("webhook", "list", "acme")] == [made["id"]]
        assert "0 events of acme" in acme.ok("webhook", "replay", "acme", "--since", "1h")
    first, second = server.server.seen("/hook")
    Webhook(secret).verify(first.body, first.headers)
    assert json.loads(first.body)["type"] == "webhook.test"
    signatures = second.headers["webhook-signature"].split(" ")
    assert len(signatures) == 2  # the new secret and, for 24 hours, the old one
    Webhook(rotated["secret"]).verify(second.body, second.headers)
    Webhook(secret).verify(second.body, second.headers)


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["add", "acme", "https://169.254.169.254/"], "169.254.169.254 is a link-local address"),
        (["add", "acme", "http://hooks.example.com/"], "must be https"),
        (["add", "acme", "https://hooks.example.com/", "--events", "sent"], "'sent' is not"),
        (["add", "nobody", "https://hooks.example.com/"], "no tenant named 'nobody'"),
        (["add", "acme", "https://hooks.example.com/", "--rate", "-1"], "an endpoint's rate"),
        (["remove", "acme", "7"], "the tenant has no webhook endpoint 7"),
        (["test", "acme", "7"], "the tenant has no webhook endpoint 7"),
        (["replay", "acme", "--since", "yesterday"], "cannot read 'yesterday' as --since"),
        (["rotate-secret", "acme", "7", "--grace", "soon"], "the grace period"),
        (["events", "acme", "--limit", "0"], "the limit must be 1 to 1000"),
    ],
)
def test_bad_input_is_one_sentence(acme: Cli, args: list[str], sentence: str) -> None:
    result = acme("webhook", *args)
    assert result.code == 2, result.out
    assert sentence in result.err and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert sql(acme.db_url or "", "SELECT count(*) FROM event_endpoints") == [(0,)]
