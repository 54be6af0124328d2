"""``omnipost provider test NAME RECIPIENT`` for the twilio, fcm and apns kinds, each configured
with the CLI to point at its loopback server (``testkit.provider_loopback``): one line that says
the outcome, exit 0 only when delivered, and neither the recipient nor a secret in any output."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.cli import Cli
from testkit.provider_loopback import (
    KINDS,
    ApnsLoopback,
    BackgroundLoop,
    FcmLoopback,
    Loopback,
    TwilioLoopback,
    provider_flags,
)

pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)

LOOPBACKS: dict[str, type[TwilioLoopback | FcmLoopback | ApnsLoopback]] = {
    "twilio": TwilioLoopback,
    "fcm": FcmLoopback,
    "apns": ApnsLoopback,
}


def provider_test(
    cli: Cli, folder: Path, kind: str, *, locked: bool, gone: bool = False
) -> tuple[Loopback, str, str]:
    """``provider test`` through a provider of ``kind`` (``locked``: with credentials that its
    server refuses; ``gone``: to a recipient the server says is gone for good), checked to print
    one line and nothing on standard error, to exit 0 when delivered and 1 otherwise; returns
    the server, the recipient and the line."""
    loopback: Loopback = LOOPBACKS[kind]()
    recipient = loopback.recipient(7)
    if gone:
        loopback.plans.steps[recipient] = ["gone"]
    with BackgroundLoop() as loop:
        loopback.start(loop, folder)
        flags = provider_flags(loopback.options(locked=locked))
        cli.ok("provider", "add", "push", "--kind", kind, *flags)
        result = cli("provider", "test", "push", recipient)
    assert result.code == (1 if locked or gone else 0), result
    assert result.err == "" and result.out.count("\n") == 1, result
    assert result.out.startswith("test send to ") and " via push: " in result.out
    assert recipient not in result.out
    assert not [t for t in cli.transcript for s in loopback.secrets if s in t], "secret shown"
    return loopback, recipient, result.out


@pytest.mark.parametrize("kind", KINDS)
def test_a_test_send_is_delivered(kind: str, cli: Cli, tmp_path: Path) -> None:
    loopback, recipient, out = provider_test(cli, tmp_path, kind, locked=False)
    assert ": delivered" in out
    assert [(h.recipient, h.status) for h in loopback.hits()] == [(recipient, loopback.ok_status)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_test_send_to_a_gone_recipient_says_so(kind: str, cli: Cli, tmp_path: Path) -> None:
    loopback, _, out = provider_test(cli, tmp_path, kind, locked=False, gone=True)
    assert ": permanent (" in out and loopback.gone[1] in out
    assert out.endswith("; the provider says this recipient is gone for good\n")


@pytest.mark.parametrize("kind", KINDS)
def test_refused_credentials_make_a_test_send_unavailable(
    kind: str, cli: Cli, tmp_path: Path
) -> None:
    _, _, out = provider_test(cli, tmp_path, kind, locked=True)
    assert ": unavailable (" in out


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_test_send_is_one_line_and_exit_1(kind: str, cli: Cli, tmp_path: Path) -> None:
    provider_test(cli, tmp_path, kind, locked=True)
