"""The HTTP API inside a worker (``omnipost worker --serve PORT``): one process that takes
notifications over HTTP and delivers them, with the API's figures on the worker's metrics
endpoint (labels by route template, never a key or a recipient)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from testkit.api import set_up
from testkit.cli import Cli, clean_env, start_worker
from testkit.redis_server import free_port

pytestmark = pytest.mark.slow


def test_a_worker_serves_the_api_and_its_metrics(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = set_up(cli)
    port, metrics_port = free_port(), free_port()
    env = clean_env(tmp_path, OMNIPOST_DB=store_url)
    log = tmp_path / "worker.log"
    worker = start_worker(["--serve", str(port), "--metrics-port", str(metrics_port)], env, log)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {keys['acme']}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert worker.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        body = {"provider": "sim", "recipient": "ada@example.com", "payload": {"text": "hi"}}
        sent = httpx.post(f"{base}/v1/notifications", json=body, headers=auth)
        assert sent.status_code == 202, sent.text
        one = sent.json()["id"]
        while True:  # the worker delivers what its API took
            state = httpx.get(f"{base}/v1/notifications/{one}", headers=auth).json()["state"]
            if state == "delivered":
                break
            assert time.monotonic() < deadline + 30, state
            time.sleep(0.1)
        assert httpx.get(f"{base}/v1/limits").status_code == 401
        scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert (
            'omnipost_api_requests_total{method="POST",route="/v1/notifications",status="202"} 1.0'
            in scrape
        )
        assert (
            'omnipost_api_request_seconds_bucket{le="0.001",route="/v1/notifications/{id}"}'
            in scrape
        )
        assert 'omnipost_api_rejected_total{reason="unauthorized"} 1.0' in scrape
        assert keys["acme"] not in scrape and "ada@example.com" not in scrape
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    output = log.read_text()
    assert code == 0, output
    assert f"the API on http://127.0.0.1:{port}/v1" in output
    assert keys["acme"] not in output and "Traceback" not in output
