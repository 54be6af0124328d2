"""A worker SIGKILLed during a burst with an endpoint subscribed (issue 48): every notification
that reached a terminal state has its event at the receiver at least once.

The store writes each event with the change that causes it, so the kill can lose none; the
second worker's courier takes back what the first one had leased (its lease follows the
worker's ``--lease-s``) and ``--until-empty`` waits for the events due as well."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

from standardwebhooks.webhooks import Webhook

from testkit.cli import Cli, clean_env, file_run, start_worker, stats_depth
from testkit.servers import Reply, ThreadedServer

from .test_crash import wait_for_lines

COUNT = 400
KILL_AFTER_LINES = 80


def test_a_killed_worker_loses_no_status_event(cli: Cli, store_url: str, tmp_path: Path) -> None:
    keys = [f"evt-{n}" for n in range(COUNT)]
    out = file_run(cli, tmp_path, keys, rate="150", burst="10")
    with ThreadedServer({"/hook": [Reply(204)]}) as receiver:
        made = cli.json("webhook", "add", "acme", receiver.url("/hook"), "--allow-private")
        env = clean_env(tmp_path, OMNIPOST_DB=store_url)
        first_log = tmp_path / "first.log"
        first = start_worker(["--quiet", "--concurrency", "8", "--lease-s", "2"], env, first_log)
        try:
            wait_for_lines(out, KILL_AFTER_LINES, first, first_log)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=60)
        assert first.returncode == -signal.SIGKILL
        assert stats_depth(cli)["delivered"] < COUNT  # it really died half-way
        second_log = tmp_path / "second.log"
        second = start_worker(["--quiet", "--until-empty", "--lease-s", "2"], env, second_log)
        try:
            assert second.wait(timeout=180) == 0, second_log.read_text()
        finally:
            second.kill()
            second.wait()
    assert stats_depth(cli)["delivered"] == COUNT
    requests = receiver.server.seen("/hook")
    hook = Webhook(made["secret"])
    bodies = []
    for request in requests:
        hook.verify(request.body, request.headers)
        bodies.append(json.loads(request.body))
    delivered = Counter(b["data"]["idempotency_key"] for b in bodies)
    assert set(delivered) == set(keys)  # every one, at least once
    assert {b["type"] for b in bodies} == {"notification.delivered"}
    print(f"{sum(delivered.values()) - COUNT} events sent twice around the kill")
