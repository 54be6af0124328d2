"""A private ``redis-server`` for one test (or one bench run): its own loopback port and folder.

Tests that stop and start Redis must never touch the shared server at 6379, which other tests
use at the same time; this one belongs to its caller alone. It keeps nothing on disk (no RDB,
no AOF), so a restart comes back empty, as a real Redis without persistence does.

    with RedisServer(tmp_path) as redis:  # started; stopped on exit
        ...redis.url...
        redis.stop(); redis.start()       # the same port again
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["RedisServer", "free_port", "redis_server_binary"]

HOST = "127.0.0.1"


def redis_server_binary() -> str | None:
    """The path of ``redis-server`` on PATH, or None."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    """True when a Redis on ``port`` replies ``+PONG`` to a ``PING``."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port`` with ``folder`` as its directory.

    ``start`` returns once it answers a PING (``RuntimeError`` with its log after
    ``start_timeout_s``); ``stop`` shuts it down and waits; both are safe to call twice.
    The port stays the same across restarts.
    """

    def __init__(self, folder: Path, *, port: int | None = None, start_timeout_s: float = 10.0):
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError("redis-server is not on PATH")
        self._binary = binary
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log = folder / "redis.log"
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The process id while started (to pause it with SIGSTOP, say), else None."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        args = [
            self._binary,
            "--bind", HOST,
            "--port", str(self.port),
            "--dir", str(self.folder),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.log),
        ]  # fmt: skip
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self._start_timeout_s
        while not _answers(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on {self.port}: {self._log()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM (Redis closes every client connection and exits), SIGKILL after 10 s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL: Redis dies at once, its clients' connections cut without a word."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def _log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2000:]
        return "(no log)"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {HOST}:{self.port} {state} in {self.folder}>"
