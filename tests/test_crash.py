"""A worker process killed with SIGKILL mid-run; a second worker finishes the queue.

Nothing is lost, and every redelivery is the same notification (same id, same idempotency key)
under a higher attempt number. A ``file`` provider records each send; the tenant's rate
(150/s over 600 notifications) makes the run last long enough to kill it half-way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import REPO, Cli, clean_env

COUNT = 600
KILL_AFTER_LINES = 100


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of the file provider's output (a line being written is skipped)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def start_worker(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "--quiet", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while len(read_lines(path)) <= n:
        exited = proc.poll()
        assert exited is None, f"the worker exited early ({exited}): {log.read_text()}"
        assert time.monotonic() < deadline, f"no progress: {log.read_text()}"
        time.sleep(0.05)


def depth(cli: Cli) -> dict[str, int]:
    [acme] = cli.json("stats")["depth"]
    return {k: acme[k] for k in ("queued", "leased", "delivered", "dead")}


def test_a_killed_worker_loses_nothing_and_redelivers_under_the_same_key(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    cli = Cli(capsys, store_url)
    out = tmp_path / "delivered.jsonl"
    cli.ok("migrate")
    cli.ok("tenant", "add", "acme", "--rate", "150", "--burst", "10")
    cli.ok("provider", "add", "audit", "--kind", "file", "--option", f"path={out}")
    keys = [f"crash-{n}" for n in range(COUNT)]
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "".join(
            json.dumps(
                {"tenant": "acme", "provider": "audit", "recipient": f"u{n}@example.com", "key": k}
            )
            + "\n"
            for n, k in enumerate(keys)
        ),
        encoding="utf-8",
    )
    assert cli.ok("enqueue", "--file", str(batch)) == f"queued {COUNT}, already queued 0\n"

    env = clean_env(tmp_path, OMNIPOST_DB=store_url)
    first_log = tmp_path / "first.log"
    first = start_worker(["--concurrency", "8", "--lease-s", "2"], env, first_log)
    try:
        wait_for_lines(out, KILL_AFTER_LINES, first, first_log)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    at_kill = depth(cli)
    assert at_kill["delivered"] < COUNT, at_kill  # it really died half-way

    second_log = tmp_path / "second.log"
    second = start_worker(["--until-empty", "--lease-s", "2"], env, second_log)
    try:
        assert second.wait(timeout=180) == 0, second_log.read_text()
    finally:
        second.kill()
        second.wait()

    assert depth(cli) == {"queued": 0, "leased": 0, "delivered": COUNT, "dead": 0}
    lines = read_lines(out)
    sends: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        sends[line["idempotency_key"]].append(line)
    assert sorted(sends) == sorted(keys)  # none lost, nothing foreign
    ids = {key: line["notification_id"] for key, [line, *_] in sends.items()}
    assert len(set(ids.values())) == COUNT  # one notification per key
    for key, repeats in sends.items():
        assert {r["notification_id"] for r in repeats} == {ids[key]}, repeats
        assert {r["recipient"] for r in repeats} == {repeats[0]["recipient"]}
        attempts = [r["attempt"] for r in repeats]
        assert attempts == sorted(set(attempts)), (key, attempts)  # each later send is higher
    print(f"{len(lines) - COUNT} redeliveries after the kill at {at_kill}")
