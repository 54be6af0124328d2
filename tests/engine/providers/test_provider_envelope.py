"""1,000 sends through each of Twilio, FCM and APNs at 100/s, by an ``omnipost worker`` process on
a SQLite store, hold the rate envelope where it matters: at the vendor's server. The loopback
server (``testkit.provider_loopback``) stamps each request as it reads it; in every window of W
seconds it saw at most ``burst + rate * W + 1``, give or take the sends that reach it late
(``ARRIVAL_LAG_S``, and the longest the server's own loop stalled meanwhile), and with the
whole backlog queued from the start the run kept the pace (it took about
``(1000 - burst) / rate`` seconds, not much longer)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testkit.cli import Cli
from testkit.envelope import check_envelope
from testkit.provider_loopback import (
    KINDS,
    ApnsLoopback,
    BackgroundLoop,
    FcmLoopback,
    Loopback,
    TwilioLoopback,
    enqueue,
    provider_flags,
    run_worker,
)

pytestmark = pytest.mark.slow

COUNT = 1000
RATE_PER_S, BURST = 100.0, 10.0
# The server stamps a request when it reads it, a little after the worker took its token: the
# first sends wait for their connections (and FCM's for the access token, APNs' for TLS) and
# then go out together with the next ones, and on 2 cores shared with other test runs (load 5)
# either process may be held up for tens of ms. Measured: up to 7 arrivals (70 ms at 100/s)
# above ``burst + rate * W + 1`` in windows of 0.1 to 0.5 s, none above it by more; at load 2-3,
# none for twilio and fcm and 2 for apns (20 ms). OMNIPOST_ARRIVAL_LAG_S sets it for such a check.
# On top of it, the longest the server's own loop stalled while the sends came in: the server
# shares the test session's process, and late in a whole suite a stall there (measured here:
# 0.3 s with a collection over a million objects, and 32 arrivals in a 0.1 s window) reads the
# sends that reached it meanwhile all at once; such a window is the server's, not the worker's.
ARRIVAL_LAG_S = float(os.environ.get("OMNIPOST_ARRIVAL_LAG_S", "0.1"))
# A run may fall a little behind the limit (a worker process and the server share 2 loaded
# cores here), never ahead of it: at most this much longer than the ideal.
PACE = 1.3
LOOPBACKS: dict[str, type[TwilioLoopback | FcmLoopback | ApnsLoopback]] = {
    "twilio": TwilioLoopback,
    "fcm": FcmLoopback,
    "apns": ApnsLoopback,
}


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_1000_sends_at_100_per_s_hold_the_envelope_at_the_server(
    kind: str, cli: Cli, store_url: str, tmp_path: Path
) -> None:
    loopback: Loopback = LOOPBACKS[kind]()
    recipients = {f"n-{n}": loopback.recipient(n) for n in range(COUNT)}
    with BackgroundLoop() as loop:
        loopback.start(loop, tmp_path)
        cli.ok("tenant", "add", "acme")
        limit = ["--rate", f"{RATE_PER_S:g}", "--burst", f"{BURST:g}"]
        cli.ok(
            "provider", "add", "push", "--kind", kind, *limit, *provider_flags(loopback.options())
        )
        enqueue(cli, tmp_path, [(k, "push", r) for k, r in recipients.items()])
        code, log = run_worker(tmp_path, store_url, 16)

    assert code == 0, log
    hits = loopback.hits()
    assert sorted(h.recipient for h in hits) == sorted(recipients.values())  # each once
    assert {h.status for h in hits} == {loopback.ok_status}
    ts = sorted(h.at for h in hits)
    stalls_s = loop.stall_s(ts[0], ts[-1])
    found = check_envelope(ts, RATE_PER_S, BURST, lag_s=ARRIVAL_LAG_S + stalls_s)
    ideal_s = (COUNT - BURST) / RATE_PER_S
    span_s = ts[-1] - ts[0]
    assert ideal_s * 0.95 <= span_s <= ideal_s * PACE, f"took {span_s:.2f}s, ideal {ideal_s}s"
    print(
        f"{kind}: {span_s:.2f}s, server stalled {stalls_s * 1000:.0f} ms, most in a window: {found}"
    )


def test_the_server_loop_notes_how_long_it_stalled() -> None:
    """A stall of the server's loop (here a blocking sleep on it) is found in a span it ended
    in, and not in one that ended before it began."""

    async def hold_up() -> None:
        time.sleep(0.2)  # the loop's thread held up, as by a long collection

    with BackgroundLoop() as loop:
        time.sleep(0.05)
        before = time.monotonic()
        loop.run(hold_up())
        time.sleep(0.05)
        after = time.monotonic()
    assert loop.stall_s(before, after) >= 0.19
    assert loop.stall_s(0.0, before) < loop.stall_s(before, after)
