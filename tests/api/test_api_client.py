"""The example client (docs/examples/omnipost_client.py) against a real server, and what its
retries with idempotency keys are for: clients whose answers are lost on the way back (a proxy
drops some connections after the request went through) and a server killed mid-load and
started again, with exactly one notification per key and none lost."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from testkit.api import DroppingProxy, serve, set_up
from testkit.cli import REPO, Cli

pytestmark = pytest.mark.slow


def _client_module() -> ModuleType:
    path = REPO / "docs" / "examples" / "omnipost_client.py"
    spec = importlib.util.spec_from_file_location("omnipost_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["omnipost_client"] = module
    spec.loader.exec_module(module)
    return module


CLIENT = _client_module()


def test_the_example_client_sends_looks_cancels_and_pages(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    keys = set_up(cli)
    with (
        serve(store_url, tmp_path, keys) as served,
        CLIENT.OmniPost(served.base, keys["acme"]) as client,
    ):
        sent = client.send("sim", "ada@example.com", {"text": "hi"}, idempotency_key="one")
        assert sent["state"] == "queued"
        assert client.send("sim", "ada@example.com", {"text": "hi"}, idempotency_key="one") == sent
        batch = client.send_batch(
            [{"provider": "sim", "recipient": f"u{n}@example.com"} for n in range(25)]
        )
        assert len(batch) == 25
        assert client.cancel(batch[0]["id"])["state"] == "cancelled"
        everything = list(client.notifications(page=7))
        assert [n["id"] for n in everything] == sorted(
            [sent["id"], *(b["id"] for b in batch)], reverse=True
        )
        assert [n["id"] for n in client.notifications(state="cancelled")] == [batch[0]["id"]]
        assert client.limits()["queued"] == 25
        with pytest.raises(CLIENT.OmniPostError) as refused:
            client.send("nope", "x")
        assert refused.value.status == 422 and refused.value.problem["field"] == "provider"


CLIENTS = 32
# Notifications per client: 40 in the suite; the full run (2,000 each, 64,000 in all)
# is `OMNIPOST_FAULT_EACH=2000 pytest tests/api/test_api_client.py -k killed`.
EACH = int(os.environ.get("OMNIPOST_FAULT_EACH", "40"))


def test_lost_answers_and_a_killed_server_queue_each_key_exactly_once(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    keys = set_up(cli)
    cli.ok("tenant", "set", "acme", "--api-rate", "100000/s")
    answered: dict[str, int] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    with serve(store_url, tmp_path, keys) as first:
        port = int(first.base.rsplit(":", 1)[1])
        with DroppingProxy(port, drop=0.05) as proxy:

            def one_client(n: int) -> None:
                try:
                    with CLIENT.OmniPost(
                        f"http://127.0.0.1:{proxy.port}", keys["acme"], attempts=40
                    ) as client:
                        for i in range(EACH):
                            key = f"client{n}-{i}"
                            body = {"text": f"{n}/{i}"}
                            got = client.send("sim", f"u{n}@example.com", body, idempotency_key=key)
                            with lock:
                                answered[key] = got["id"]
                except BaseException as exc:  # noqa: BLE001  # reported below
                    failures.append(exc)

            threads = [threading.Thread(target=one_client, args=(n,)) for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            while len(answered) < CLIENTS * EACH // 3 and not failures:
                time.sleep(0.01)
            first.process.send_signal(signal.SIGKILL)  # under load, mid-request
            first.process.wait(timeout=10)
            with serve(store_url, tmp_path, keys, port=port) as second:
                for thread in threads:
                    thread.join(timeout=240 + EACH)
                assert not failures, failures[:3]
                assert len(answered) == CLIENTS * EACH
                stored = _all_ids(second.base, keys["acme"])
            assert proxy.dropped > 0
    # Every key answered 2xx is in the store once; nothing else is.
    assert len(set(answered.values())) == CLIENTS * EACH
    assert sorted(stored) == sorted(answered.values())


def _all_ids(base: str, key: str) -> list[int]:
    with CLIENT.OmniPost(base, key) as client:
        return [int(n["id"]) for n in client.notifications(page=1000)]
