"""``/v1/webhooks`` through a real ``omnipost serve`` on loopback, on both stores: a key with the
``webhooks`` scope subscribes, lists, rotates and removes its tenant's endpoints; the secret is
answered once; private addresses are refused (never allowed through the API); another tenant's
endpoint is answered as a missing one; a key without the scope is a 403."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.api import serve, set_up
from testkit.cli import Cli, sql

pytestmark = pytest.mark.slow


def test_a_tenant_manages_its_webhooks(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = set_up(cli)
    keys["acme"] = cli.json("apikey", "create", "acme", "--scope", "send,read,webhooks")["key"]
    keys["beta"] = cli.json("apikey", "create", "beta", "--scope", "webhooks")["key"]
    with serve(store_url, tmp_path, keys) as served, served.client("acme") as c:
        made = c.post(
            "/v1/webhooks",
            json={"url": "https://hooks.example.com/omnipost", "events": ["delivered", "dead"]},
        )
        assert made.status_code == 201, made.text
        body: dict[str, Any] = made.json()
        assert body["secret"].startswith("whsec_")
        hook = body["webhook"]
        assert hook["events"] == ["notification.delivered", "notification.dead"]
        assert hook["enabled"] is True and hook["pending"] == 0
        listed = c.get("/v1/webhooks").json()["webhooks"]
        assert [h["id"] for h in listed] == [hook["id"]]
        assert "secret" not in listed[0] and body["secret"] not in c.get("/v1/webhooks").text
        rotated = c.post(f"/v1/webhooks/{hook['id']}/rotate-secret")
        assert rotated.status_code == 200 and rotated.json()["secret"] != body["secret"]
        for url in ("https://169.254.169.254/", "http://hooks.example.com/", "https://10.1.2.3/"):
            refused = c.post("/v1/webhooks", json={"url": url})
            assert refused.status_code == 422, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
        # allow_private is the operator's: the API has no such field.
        private = {"url": "https://10.1.2.3/", "allow_private": True}
        assert c.post("/v1/webhooks", json=private).status_code == 422
        bad_type = c.post("/v1/webhooks", json={"url": "https://a.example.com/", "events": ["x"]})
        assert bad_type.status_code == 422 and "'x' is not an event type" in bad_type.text
        with served.client("beta") as other:
            assert other.get("/v1/webhooks").json() == {"webhooks": []}
            assert other.delete(f"/v1/webhooks/{hook['id']}").status_code == 404
        assert c.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        assert c.get("/v1/webhooks").json() == {"webhooks": []}
        assert c.delete(f"/v1/webhooks/{hook['id']}").status_code == 404
    send_only = cli.json("apikey", "create", "acme")["key"]
    keys["acme"] = send_only
    with serve(store_url, tmp_path, keys) as served, served.client("acme") as c:
        denied = c.get("/v1/webhooks")
        assert denied.status_code == 403
        assert denied.json()["detail"].startswith("this key may not manage webhooks")
    audit = sql(store_url, "SELECT action, detail FROM audit_log")
    actions = {action for action, _ in audit}
    assert {"webhook.add", "webhook.rotate_secret", "webhook.remove"} <= actions
    assert not any(body["secret"] in detail for _, detail in audit)
    stored = sql(store_url, "SELECT secret FROM event_endpoints")
    assert stored == []  # removed; the CLI test checks that a kept secret is encrypted
