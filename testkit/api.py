"""A real ``omnipost serve`` process on loopback for the HTTP API's tests, on a store the
test set up with the CLI: tenants ``acme`` and ``beta``, a simulated provider ``sim``, and a
key of each tenant."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testkit.cli import REPO, Cli, clean_env
from testkit.redis_server import free_port

__all__ = ["DroppingProxy", "Served", "serve", "set_up"]


@dataclass
class Served:
    """A running server: ``base`` URL, the keys of ``acme`` and ``beta``, its process."""

    base: str
    keys: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    def client(self, tenant: str | None = "acme", **headers: str) -> httpx.Client:
        auth = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.base, headers={**auth, **headers}, timeout=10.0)

    def post(self, tenant: str | None, body: Any, **headers: str) -> httpx.Response:
        with self.client(tenant) as c:
            return c.post("/v1/notifications", json=body, headers=headers)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def set_up(cli: Cli) -> dict[str, str]:
    """Tenants, provider and keys on ``cli``'s store; the keys by tenant."""
    keys = {}
    cli.ok("provider", "add", "sim", "--kind", "simulated")
    for tenant in ("acme", "beta"):
        cli.ok("tenant", "add", tenant)
        keys[tenant] = cli.json("apikey", "create", tenant)["key"]
    return keys


@contextlib.contextmanager
def serve(
    store_url: str,
    home: Path,
    keys: dict[str, str],
    *args: str,
    wait_s: float = 30.0,
    port: int | None = None,
) -> Iterator[Served]:
    """Run ``omnipost serve`` on ``port`` (default: a free one) until the block ends (then
    SIGTERM, unless the test stopped it itself)."""
    port = port or free_port()
    log = home / f"serve-{port}.log"
    env = clean_env(home, OMNIPOST_DB=store_url)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    served = Served(f"http://127.0.0.1:{port}", keys, process, log)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if process.poll() is not None:
                raise AssertionError(
                    f"omnipost serve exited {process.returncode}: {served.output()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{served.base}/readyz", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"omnipost serve did not answer: {served.output()}")
            time.sleep(0.05)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


class DroppingProxy:
    """A TCP proxy on loopback to ``target_port`` that, for a share ``drop`` of the server's
    answers, closes the client's connection instead of passing the answer on: the request
    arrived and was acted on, the client never hears. Runs on a thread of its own."""

    def __init__(self, target_port: int, drop: float, *, seed: int = 7) -> None:
        import random

        self.port = free_port()
        self.target_port = target_port
        self.drop = drop
        self.dropped = 0
        self.answers = 0
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DroppingProxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._pipe, "127.0.0.1", self.port)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self._loop.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def upstream() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                self.answers += 1
                if self._rng.random() < self.drop:
                    self.dropped += 1
                    return  # the answer is lost with the connection
                writer.write(data)
                await writer.drain()

        up = asyncio.ensure_future(upstream())
        try:
            await downstream()
        except OSError:
            pass
        finally:
            up.cancel()
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await w.wait_closed()
