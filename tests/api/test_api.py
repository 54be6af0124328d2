"""The HTTP API through a real ``omnipost serve`` process on loopback, on both stores: every
route, tenant isolation, keys, idempotency, the request limit and queue cap, bad requests as
problem+json with nothing written, and a clean stop on SIGTERM and SIGINT."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import SecretBox, Store
from testkit.api import Served, serve, set_up
from testkit.cli import Cli

pytestmark = pytest.mark.slow

ONE = {"provider": "sim", "recipient": "ada@example.com", "payload": {"text": "hello"}}


@pytest.fixture
def served(cli: Cli, store_url: str, tmp_path: Path) -> Any:
    keys = set_up(cli)
    with serve(store_url, tmp_path, keys) as server:
        yield server


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    detail = body["detail"]
    assert detail.endswith(".") and "\n" not in detail and "Traceback" not in detail, detail
    return dict(body)


def _all(served: Served, tenant: str = "acme", **params: Any) -> list[dict[str, Any]]:
    with served.client(tenant) as c:
        answer = c.get("/v1/notifications", params={"limit": 1000, **params})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["notifications"])


def test_queue_look_page_cancel_and_limits(served: Served, cli: Cli) -> None:
    first = served.post("acme", ONE)
    assert first.status_code == 202
    one = first.json()
    assert one["state"] == "queued" and one["duplicate"] is False and one["provider"] == "sim"
    assert "q=200;w=2" in first.headers["RateLimit-Policy"]
    assert first.headers["RateLimit"].startswith('"per-key";r=')

    batch = {"notifications": [{**ONE, "recipient": f"u{n}@example.com"} for n in range(5)]}
    many = served.post("acme", batch)
    assert many.status_code == 202
    ids = [n["id"] for n in many.json()["notifications"]]
    assert len(ids) == 5 and ids == sorted(ids) and ids[0] > one["id"]

    with served.client() as c:
        got = c.get(f"/v1/notifications/{one['id']}").json()
        assert got["state"] == "queued" and got["provider"] == "sim"
        assert got["recipient"] != ONE["recipient"] and "***" in got["recipient"]
        # Newest first, two at a time, along the cursor.
        seen: list[int] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = c.get("/v1/notifications", params=params).json()
            seen += [n["id"] for n in page["notifications"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted([one["id"], *ids], reverse=True)

        cancelled = c.post(f"/v1/notifications/{ids[0]}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["notification"]["state"] == "cancelled"
        again = _problem(c.post(f"/v1/notifications/{ids[0]}/cancel"), 409)
        assert again["state"] == "cancelled"

        only = c.get("/v1/notifications", params={"state": "cancelled"}).json()
        assert [n["id"] for n in only["notifications"]] == [ids[0]]
        assert c.get("/v1/notifications", params={"provider": "sim"}).json()["notifications"]
        _problem(c.get("/v1/notifications", params={"provider": "nope"}), 422)
        _problem(c.get("/v1/notifications", params={"provider": "\x00x"}), 422)
        _problem(c.get("/v1/notifications", params={"cursor": "not-ours"}), 422)
        _problem(c.get("/v1/notifications", params={"state": "lost"}), 422)

        # A recipient on the tenant's suppression list: answered, never queued.
        cli.ok("suppression", "add", "acme", "sim", "gone@example.com")
        gone = c.post("/v1/notifications", json={**ONE, "recipient": "gone@example.com"})
        assert gone.status_code == 202 and gone.json()["state"] == "suppressed", gone.text
        shown = c.get(f"/v1/notifications/{gone.json()['id']}").json()
        assert shown["state"] == "suppressed" and "suppression list" in shown["last_error"]
        only = c.get("/v1/notifications", params={"state": "suppressed"}).json()
        assert [n["id"] for n in only["notifications"]] == [gone.json()["id"]]
        _problem(c.post(f"/v1/notifications/{gone.json()['id']}/cancel"), 409)

        limits = c.get("/v1/limits").json()
        assert limits["tenant"] == "acme" and limits["queued"] == 5
        assert limits["requests"] == {"rate_per_s": 100.0, "burst": 200.0}
        assert limits["max_queued"] == 1_000_000

    assert httpx.get(f"{served.base}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{served.base}/readyz").json() == {"status": "ok"}


def test_another_tenants_ids_are_missing_ids(served: Served) -> None:
    mine = served.post("acme", ONE).json()["id"]
    with served.client("beta") as theirs, served.client("acme") as c:
        gone = mine + 1000
        missing = _problem(theirs.get(f"/v1/notifications/{gone}"), 404)
        other = _problem(theirs.get(f"/v1/notifications/{mine}"), 404)
        assert other["detail"] == missing["detail"].replace(str(gone), str(mine))
        assert other.keys() == missing.keys()
        cancel = _problem(theirs.post(f"/v1/notifications/{mine}/cancel"), 404)
        missing_cancel = _problem(theirs.post(f"/v1/notifications/{gone}/cancel"), 404)
        assert cancel["detail"] == missing_cancel["detail"].replace(str(gone), str(mine))
        assert theirs.get("/v1/notifications").json()["notifications"] == []
        assert theirs.get("/v1/limits").json()["queued"] == 0
        # Nothing changed for acme.
        assert c.get(f"/v1/notifications/{mine}").json()["state"] == "queued"


def test_keys_missing_unknown_revoked_and_scope(served: Served, cli: Cli, tmp_path: Path) -> None:
    nobody = httpx.post(f"{served.base}/v1/notifications", json=ONE)
    assert _problem(nobody, 401) and nobody.headers["WWW-Authenticate"].startswith("Bearer")
    for bad in ("op_", "nonsense", served.keys["acme"][:-1] + "x", "Basic abc"):
        answer = httpx.get(f"{served.base}/v1/limits", headers={"Authorization": f"Bearer {bad}"})
        _problem(answer, 401)
    reader = cli.json("apikey", "create", "acme", "--scope", "read")
    with httpx.Client(
        base_url=served.base, headers={"Authorization": f"Bearer {reader['key']}"}
    ) as c:
        assert _problem(c.post("/v1/notifications", json=ONE), 403)["detail"].startswith(
            "this key may not send"
        )
        assert c.get("/v1/notifications").status_code == 200
    cli.ok("apikey", "revoke", str(reader["id"]))
    time.sleep(1.1)  # a server checks a live key against the store again after a second
    with httpx.Client(
        base_url=served.base, headers={"Authorization": f"Bearer {reader['key']}"}
    ) as c:
        _problem(c.get("/v1/notifications"), 401)
    # A key never reaches the server's output.
    assert served.keys["acme"] not in served.output()
    assert reader["key"] not in served.output()


def test_idempotency_replays_refuses_and_takes_over(
    served: Served, store_url: str, box_of_home: SecretBox
) -> None:
    batch = {"notifications": [ONE, {**ONE, "recipient": "bob@example.com"}]}
    first = served.post("acme", batch, **{"Idempotency-Key": "order-1"})
    assert first.status_code == 202 and "Idempotent-Replay" not in first.headers
    again = served.post("acme", batch, **{"Idempotency-Key": "order-1"})
    assert again.status_code == 202 and again.headers["Idempotent-Replay"] == "true"
    assert again.json() == first.json()
    other = served.post("acme", ONE, **{"Idempotency-Key": "order-1"})
    assert _problem(other, 422)["field"] == "Idempotency-Key"
    _problem(served.post("acme", ONE, **{"Idempotency-Key": "k" * 256}), 400)
    # The same key is another tenant's own.
    assert served.post("beta", ONE, **{"Idempotency-Key": "order-1"}).status_code == 202
    assert len(_all(served)) == 2

    # A request in flight (claimed by a server that then died): 409 with Retry-After while
    # its lease runs, then the retry takes it over and succeeds.
    async def claim() -> None:
        async with Store(store_url, box_of_home) as store:
            from app.wiring import build_engine

            engine = build_engine(store)
            async with engine:
                await engine.request_claim("acme", "order-2", "f" * 64, owner="dead-server")

    asyncio.run(claim())
    started = time.monotonic()
    busy = served.post("acme", ONE, **{"Idempotency-Key": "order-2"})
    assert _problem(busy, 422)["field"] == "Idempotency-Key"  # another body's fingerprint
    asyncio.run(_claim_same(store_url, box_of_home, ONE))
    in_flight = served.post("acme", ONE, **{"Idempotency-Key": "order-3"})
    _problem(in_flight, 409)
    assert 1 <= int(in_flight.headers["Retry-After"]) <= 5
    while True:
        retry = served.post("acme", ONE, **{"Idempotency-Key": "order-3"})
        if retry.status_code == 202:
            break
        assert retry.status_code == 409 and time.monotonic() - started < 15
        time.sleep(0.5)
    assert len(_all(served)) == 3


async def _claim_same(store_url: str, box: SecretBox, body: dict[str, Any]) -> None:
    """Claim ``order-3`` for ``body`` as a server would, and die (never finish)."""
    import hashlib
    import json

    from app.wiring import build_engine

    canonical = json.dumps(
        {
            "key": None,
            "payload": body["payload"],
            "priority": 0,
            "provider": body["provider"],
            "recipient": body["recipient"],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    fingerprint = hashlib.sha256(canonical.encode()).hexdigest()
    async with Store(store_url, box) as store:
        engine = build_engine(store)
        async with engine:
            await engine.request_claim("acme", "order-3", fingerprint, owner="dead-server")


@pytest.fixture
def box_of_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SecretBox:
    from app.paths import Paths, load_box

    return load_box(Paths(tmp_path))


SOON = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400)).encode()
BAD: list[tuple[str, dict[str, str], bytes, int, str | None]] = [
    ("malformed JSON", {}, b'{"provider": ', 400, None),
    ("not JSON", {"Content-Type": "text/plain"}, b"provider=sim", 415, None),
    ("an array", {}, b"[]", 422, "body"),
    ("no recipient", {}, b'{"provider": "sim"}', 422, "recipient"),
    ("unknown provider", {}, b'{"provider": "nope", "recipient": "x"}', 422, "provider"),
    ("unknown field", {}, b'{"provider": "sim", "recipient": "x", "to": 1}', 422, "to"),
    (
        "bad priority",
        {},
        b'{"provider": "sim", "recipient": "x", "priority": "hi"}',
        422,
        "priority",
    ),
    ("lone surrogate", {}, b'{"provider": "sim", "recipient": "\\udcff"}', 422, "recipient"),
    ("NUL in a key", {}, b'{"provider": "sim", "recipient": "x", "key": "a\\u0000"}', 422, "key"),
    ("not a name", {}, b'{"provider": "a b", "recipient": "x"}', 422, "provider"),
    ("empty batch", {}, b'{"notifications": []}', 422, "notifications"),
    (
        "a send time without an offset",
        {},
        b'{"provider": "sim", "recipient": "x", "send_at": "2030-01-01T09:00:00"}',
        422,
        "send_at",
    ),
    (
        "a deadline before the send time",
        {},
        b'{"provider": "sim", "recipient": "x", "send_at": "%s",'
        b' "expires_at": "2020-01-01T08:00:00Z"}' % SOON,
        422,
        "expires_at",
    ),
    (
        "a send time too far ahead",
        {},
        b'{"provider": "sim", "recipient": "x", "send_at": "2999-01-01T09:00:00Z"}',
        422,
        "send_at",
    ),
    (
        "a deadline and a TTL in a batch",
        {},
        b'{"notifications": [{"provider": "sim", "recipient": "a"}, {"provider": "sim",'
        b' "recipient": "b", "expires_at": "2030-01-01T08:00:00Z", "ttl_s": 60}]}',
        422,
        "notifications[1].ttl_s",
    ),
    (
        "bad item",
        {},
        b'{"notifications": [{"provider": "sim", "recipient": "a"}, {"provider": "sim"}]}',
        422,
        "notifications[1].recipient",
    ),
    (
        "unknown provider in a batch",
        {},
        b'{"notifications": [{"provider": "sim", "recipient": "a"},'
        b' {"provider": "nope", "recipient": "b"}]}',
        422,
        "notifications[1].provider",
    ),
    (
        "two unknown providers in a batch: the first is named",
        {},
        b'{"notifications": [{"provider": "sim", "recipient": "a"},'
        b' {"provider": "zz", "recipient": "b"}, {"provider": "sim", "recipient": "c"},'
        b' {"provider": "aa", "recipient": "d"}, {"provider": "zz", "recipient": "e"}]}',
        422,
        "notifications[1].provider",
    ),
    ("too large", {}, b'{"provider": "sim", "recipient": "' + b"x" * (1 << 20) + b'"}', 413, None),
]


def test_a_send_time_and_a_deadline_are_kept_and_echoed_in_utc(served: Served) -> None:
    later = time.time() + 3600
    local = time.strftime("%Y-%m-%dT%H:%M:%S+01:00", time.gmtime(later + 3600))
    utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later))
    answer = served.post("acme", {**ONE, "send_at": local, "ttl_s": 300})
    assert answer.status_code == 202, answer.text
    one = answer.json()
    assert one["state"] == "scheduled"
    assert one["send_at"] == utc
    assert one["expires_at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later + 300))
    again = served.post("acme", {**ONE, "key": "code-1", "ttl_s": 60})
    assert again.json()["state"] == "queued" and again.json()["send_at"] is None
    with served.client() as c:
        got = c.get(f"/v1/notifications/{one['id']}").json()
        assert got["state"] == "scheduled"
        assert got["expires_at"] == pytest.approx(later + 300, abs=1)
        listed = c.get("/v1/notifications", params={"state": "scheduled"}).json()
        assert [n["id"] for n in listed["notifications"]] == [one["id"]]
        cancelled = c.post(f"/v1/notifications/{one['id']}/cancel")
        assert cancelled.json()["notification"]["state"] == "cancelled"


def test_bad_requests_are_problems_and_write_nothing(served: Served) -> None:
    with served.client() as c:
        for what, headers, body, status, field in BAD:
            answer = c.post(
                "/v1/notifications",
                content=body,
                headers={"Content-Type": "application/json", **headers},
            )
            problem = _problem(answer, status)
            assert problem.get("field") == field, (what, problem)
        assert c.get("/v1/notifications").json()["notifications"] == []
        _problem(c.get("/v1/nothing"), 404)
        not_allowed = c.delete("/v1/notifications")
        _problem(not_allowed, 405)
        assert not_allowed.headers["Allow"] == "GET, POST"
        _problem(c.get("/v1/notifications/abc"), 404)


def test_request_limit_and_queue_cap(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = set_up(cli)
    cli.ok("tenant", "set", "acme", "--api-rate", "1/s", "--api-burst", "3")
    cli.ok("tenant", "set", "beta", "--max-queued", "3")
    with serve(store_url, tmp_path, keys) as served:
        with served.client("acme") as c:
            answers = [c.get("/v1/limits") for _ in range(4)]
        assert [a.status_code for a in answers[:3]] == [200, 200, 200]
        refused = _problem(answers[3], 429)
        assert "limit" in refused["detail"]
        assert int(answers[3].headers["Retry-After"]) >= 1
        assert answers[3].headers["RateLimit-Policy"] == '"per-key";q=3;w=3'
        assert answers[3].headers["RateLimit"].startswith('"per-key";r=0;')

        four = {"notifications": [ONE] * 4}
        assert "queued" in _problem(served.post("beta", four), 429)["detail"]
        three = {"notifications": [ONE] * 3}
        assert served.post("beta", three).status_code == 202
        _problem(served.post("beta", ONE), 429)
        assert len(_all(served, "beta")) == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_cleanly(
    cli: Cli, store_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    keys = set_up(cli)
    with serve(store_url, tmp_path, keys) as served:
        assert served.post("acme", ONE).status_code == 202
        served.process.send_signal(sig)
        assert served.process.wait(timeout=30) == 0
    assert "Traceback" not in served.output()
    assert "the API stopped." in served.output()


def test_openapi_document(served: Served) -> None:
    doc = httpx.get(f"{served.base}/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert {
        "/v1/notifications",
        "/v1/notifications/{id}",
        "/v1/notifications/{id}/cancel",
        "/v1/limits",
        "/healthz",
        "/readyz",
    } <= set(doc["paths"])
    assert "Problem" in doc["components"]["schemas"]
    assert httpx.get(f"{served.base}/v1/docs").status_code == 200


def test_schemathesis_finds_no_server_error_and_no_answer_off_the_schema(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    """Schemathesis generates requests from the OpenAPI document (valid and not) and checks
    every answer: no 5xx, documented statuses, content types, headers and bodies. Left out:
    ``positive_data_acceptance``, since a request the schema allows may still name a provider
    that does not exist (422)."""
    keys = set_up(cli)
    keys["acme"] = cli.json("apikey", "create", "acme", "--scope", "send,read,webhooks")["key"]
    cli.ok("tenant", "set", "acme", "--api-rate", "100000/s")
    with serve(store_url, tmp_path, keys) as served:
        _schemathesis(served, tmp_path)


def _schemathesis(served: Served, tmp_path: Path) -> None:
    run = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            f"{served.base}/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {served.keys['acme']}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            "30",
            "--report-dir",
            str(tmp_path / "schemathesis"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    failure = run.stdout.find("\n- ST")  # the first failure's code, then its request
    assert run.returncode == 0, run.stdout[max(0, failure - 200) :][:4000] + run.stderr[-2000:]
    assert "Traceback" not in served.output()
