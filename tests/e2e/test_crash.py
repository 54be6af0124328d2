"""A worker process killed with SIGKILL mid-run; a second worker finishes the queue.

Nothing is lost, and every redelivery is the same notification (same id, same idempotency key)
under a higher attempt number. A ``file`` provider records each send; the tenant's rate
(150/s over 600 notifications) makes the run last long enough to kill it half-way.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from testkit.cli import Cli, clean_env, file_run, start_worker, stats_depth
from testkit.support import check_sends, read_lines

COUNT = 600
KILL_AFTER_LINES = 100


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while len(read_lines(path)) <= n:
        exited = proc.poll()
        assert exited is None, f"the worker exited early ({exited}): {log.read_text()}"
        assert time.monotonic() < deadline, f"no progress: {log.read_text()}"
        time.sleep(0.05)


def test_a_killed_worker_loses_nothing_and_redelivers_under_the_same_key(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    keys = [f"crash-{n}" for n in range(COUNT)]
    out = file_run(cli, tmp_path, keys, rate="150", burst="10")

    env = clean_env(tmp_path, OMNIPOST_DB=store_url)
    first_log = tmp_path / "first.log"
    first = start_worker(["--quiet", "--concurrency", "8", "--lease-s", "2"], env, first_log)
    try:
        wait_for_lines(out, KILL_AFTER_LINES, first, first_log)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    at_kill = stats_depth(cli)
    assert at_kill["delivered"] < COUNT, at_kill  # it really died half-way

    second_log = tmp_path / "second.log"
    second = start_worker(["--quiet", "--until-empty", "--lease-s", "2"], env, second_log)
    try:
        assert second.wait(timeout=180) == 0, second_log.read_text()
    finally:
        second.kill()
        second.wait()

    assert stats_depth(cli) == {"queued": 0, "leased": 0, "delivered": COUNT, "dead": 0}
    lines = read_lines(out)
    check_sends(lines, keys, attempts_rise=True)  # each later send of a key is a higher attempt
    print(f"{len(lines) - COUNT} redeliveries after the kill at {at_kill}")
