"""FileProvider: JSON lines, concurrent sends and concurrent processes, failures."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.core.clock import FakeClock
from engine.core.domain import Outcome
from engine.core.errors import ConfigError
from engine.providers import FileProvider, ProviderConfig
from testkit.support import message, read_lines


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[FileProvider]:
    provider = FileProvider("audit", str(tmp_path / "out.jsonl"), clock=FakeClock())
    yield provider
    await provider.aclose()


async def test_one_send_appends_one_line_with_every_field(provider: FileProvider) -> None:
    payload = {"subject": "héllo", "text": "line one\nline two", "n": [1, 2]}
    result = await provider.send(message(7, payload, attempt=2))
    assert result.outcome is Outcome.DELIVERED
    assert read_lines(provider.path) == [
        {
            "notification_id": 7,
            "tenant": "acme",
            "provider": "audit",
            "recipient": "bob@example.com",
            "payload": payload,
            "idempotency_key": "key-7",
            "attempt": 2,
            "ts": 1_700_001_000.0,
        }
    ]
    assert stat.S_IMODE(os.stat(provider.path).st_mode) == 0o600


async def test_many_concurrent_sends_write_exactly_n_intact_lines(provider: FileProvider) -> None:
    n = 2000
    big = {"text": "x" * 5000}
    results = await asyncio.gather(*(provider.send(message(i, big)) for i in range(n)))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    lines = read_lines(provider.path)
    assert sorted(line["notification_id"] for line in lines) == list(range(n))
    assert provider.written == n


_WRITER = """
import asyncio, sys
from engine.core.domain import Message
from engine.providers import FileProvider

async def main(path: str, worker: int) -> None:
    provider = FileProvider("audit", path)
    payload = {"text": str(worker) * 8000}
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(1000):
        await provider.send(Message(worker * 10000 + i, "t", "audit", "r", payload, "k", 1))
    await provider.aclose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_several_processes_appending_never_interleave(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.jsonl")
    pipe = asyncio.subprocess.PIPE
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, path, str(worker), stdin=pipe, stdout=pipe
        )
        for worker in range(2)
    ]
    for proc in procs:  # wait until all have started, so that their writes overlap
        assert proc.stdout is not None
        assert await proc.stdout.readline() == b"ready\n"
    outs = await asyncio.gather(*(proc.communicate(b"go\n") for proc in procs))
    assert [proc.returncode for proc in procs] == [0, 0], outs
    lines = read_lines(path)
    assert len(lines) == 2000
    for line in lines:
        worker = line["notification_id"] // 10000
        assert line["payload"]["text"] == str(worker) * 8000


async def test_an_unwritable_path_is_a_transient_failure_with_the_reason(tmp_path: Path) -> None:
    provider = FileProvider("audit", str(tmp_path / "missing" / "out.jsonl"))
    result = await provider.send(message())
    assert result.outcome is Outcome.TRANSIENT
    assert "No such file or directory" in result.detail
    (tmp_path / "missing").mkdir()
    assert (await provider.send(message())).outcome is Outcome.DELIVERED
    await provider.aclose()
    await provider.aclose()


async def test_a_payload_that_is_not_json_is_a_permanent_failure(provider: FileProvider) -> None:
    result = await provider.send(message(payload={"when": object()}))
    assert result.outcome is Outcome.PERMANENT
    assert "not JSON" in result.detail
    result = await provider.send(message(payload={"x": float("nan")}))
    assert result.outcome is Outcome.PERMANENT


async def test_from_config_and_repr(tmp_path: Path) -> None:
    path = str(tmp_path / "out.jsonl")
    provider = FileProvider.from_config(ProviderConfig("audit", "file", {"path": path}))
    assert provider.path == path
    assert (await provider.send(message())).outcome is Outcome.DELIVERED
    assert repr(provider) == f"FileProvider(name='audit', path={path!r}, open, written=1)"
    await provider.aclose()
    assert ", closed," in repr(provider)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({}, "option 'path' is required."),
        ({"path": "  "}, "option 'path' is required."),
        ({"path": "TMP"}, "option 'path' names a folder; give a file name."),
        ({"path": "x.jsonl", "mode": "a"}, "option 'mode' is not known to a file provider."),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict[str, str], fragment: str) -> None:
    options = {k: str(tmp_path) if v == "TMP" else v for k, v in options.items()}
    with pytest.raises(ConfigError, match=r"^provider 'audit': ") as caught:
        FileProvider.from_config(ProviderConfig("audit", "file", options))
    assert str(caught.value).endswith(fragment)
