"""Running the HTTP API (``api``) on uvicorn: ``omnipost serve`` on its own, or beside a
worker or the console in their process (``--serve PORT``).

``omnipost serve`` binds its socket first (so a taken port is one sentence, not a log page),
checks the store, then serves: in this process, or in ``--workers N`` processes sharing the
socket, each opening its own engine from the environment this process hands down
(``OMNIPOST_DB``, ``OMNIPOST_HOME`` and ``_SETTINGS_ENV``). SIGINT or SIGTERM stops taking
connections, lets the requests under way finish, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Generator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from api import ApiMetrics, ApiSettings, create_app
from app.paths import Paths, load_box
from app.session import Context, actor, store_url
from app.wiring import build_engine, build_store
from engine import ConfigError, Engine, Limit, OmniPostError, masked_url

__all__ = ["DEFAULT_PORT", "Serve", "embedded", "serve", "worker_app"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
_SETTINGS_ENV = "OMNIPOST_SERVE_SETTINGS"
_DRAIN_S = 30  # the longest a stop waits for requests under way
GC_YOUNG = 10_000  # allocations between young collections while serving (Python: 700)


@dataclass(frozen=True, slots=True)
class Serve:
    """How ``omnipost serve`` runs."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = 1
    tls_cert: str | None = None
    tls_key: str | None = None
    redis_url: str | None = None
    access_log: bool = False
    api_rate: float | None = None  # the default request limit per key, when not 100/s
    api_burst: float | None = None
    max_queued: int | None = None


def _settings(run: Serve) -> ApiSettings:
    base = ApiSettings()
    limit = base.api_limit
    if run.api_rate is not None:
        limit = Limit(run.api_rate, run.api_burst or max(1.0, run.api_rate * 2))
    return ApiSettings(
        api_limit=limit,
        max_queued=run.max_queued or base.max_queued,
        max_body=base.max_body,
        share=run.workers,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, stopping on SIGINT/SIGTERM as it does but then returning (exit 0),
    where uvicorn raises the signal again once stopped; and, beside a worker or the console,
    leaving the signals to them."""

    def __init__(self, config: uvicorn.Config, *, own_signals: bool = True) -> None:
        super().__init__(config)
        self.own_signals = own_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        if not self.own_signals:
            yield
            return
        with super().capture_signals():
            yield
            self._captured_signals.clear()  # stopped cleanly: nothing to raise again


def _config(app: Any, run: Serve, *, factory: bool = False) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        factory=factory,
        host=run.host,
        port=run.port,
        workers=run.workers,
        ssl_certfile=run.tls_cert,
        ssl_keyfile=run.tls_key,
        access_log=run.access_log,
        log_level="info" if run.access_log else "warning",
        timeout_graceful_shutdown=_DRAIN_S,
        server_header=False,
        lifespan="on",
    )


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP said outright: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
        # sockets that say so, and each accepted socket takes the listener's. Without it every
        # answer after a connection's first waited for the client's delayed ACK, about 40 ms
        # (650 requests/s on asyncio's loop, and in the console, whose loop is Qt's).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        reason = (exc.strerror or str(exc)).rstrip(".").lower()
        raise ConfigError(f"cannot serve the API on {host} port {port}: {reason}.") from None
    sock.set_inheritable(True)
    return sock


def _check_tls(run: Serve) -> None:
    if (run.tls_cert is None) != (run.tls_key is None):
        raise ConfigError("give both --tls-cert and --tls-key, or neither.")
    if run.tls_cert is None or run.tls_key is None:
        return
    for flag, path in (("--tls-cert", run.tls_cert), ("--tls-key", run.tls_key)):
        if not Path(path).is_file():
            raise ConfigError(f"{flag}: there is no file {path}.")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            run.tls_cert, run.tls_key
        )
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        raise ConfigError(
            f"cannot use {run.tls_cert} and {run.tls_key} for TLS ({reason}): are they a "
            "PEM certificate and its private key?"
        ) from None


async def _check_store(ctx: Context) -> None:
    async with build_store(ctx.db_url, ctx.box) as store:
        await store.ensure_current()


def serve(ctx: Context, run: Serve) -> int:
    """``omnipost serve``: bind, check the store, serve until SIGINT/SIGTERM; exit code."""
    _check_tls(run)
    asyncio.run(_check_store(ctx))
    sock = _bind(run.host, run.port)
    os.environ["OMNIPOST_DB"] = ctx.db_url
    os.environ["OMNIPOST_HOME"] = str(ctx.paths.data_dir)
    os.environ[_SETTINGS_ENV] = json.dumps(asdict(run))
    scheme = "https" if run.tls_cert else "http"
    host = f"[{run.host}]" if ":" in run.host else run.host
    print(
        f"serving the API on {scheme}://{host}:{sock.getsockname()[1]}/v1 "
        f"(store {masked_url(ctx.db_url)}, {run.workers} process"
        f"{'es' * (run.workers > 1)}); docs at /v1/docs",
        file=sys.stderr,
        flush=True,
    )
    config = _config("app.serve:worker_app", run, factory=True)
    server = _Server(config)
    if run.workers == 1:
        server.run(sockets=[sock])
    else:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, sockets=[sock]).run()
    print("the API stopped.", file=sys.stderr)
    return 0


def worker_app() -> FastAPI:
    """The app of one ``omnipost serve`` process, from the environment ``serve`` handed down:
    its engine opens with the app's start and closes with its stop."""
    paths = Paths.from_env()
    run = Serve(**json.loads(os.environ.get(_SETTINGS_ENV, "{}")))
    ctx = Context(paths, store_url(None, paths), load_box(paths))
    store = build_store(ctx.db_url, ctx.box)
    engine = build_engine(store, actor=actor("api"), redis_url=run.redis_url)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with store, engine:
            follow = asyncio.ensure_future(engine.follow_config())
            # What start-up made (modules, the app, the engine) lives as long as the process:
            # out of the collector's sight, a full collection no longer walks it, which took
            # an eighth of a single POST's time.
            gc.freeze()
            # A batch's body makes some thousand objects per request, nearly none of them in a
            # cycle: at Python's default (a young collection every 700 allocations, promoted
            # to older ones every 10) the collector took a sixth of the server's time in
            # bench/http_api.py's batches; a young collection every 10,000 allocations keeps
            # the same generations at a fraction of the cost (41,000 -> 50,000 rows/s).
            gc.set_threshold(GC_YOUNG, 10, 10)
            try:
                yield
            finally:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follow

    return create_app(engine, _settings(run), lifespan=lifespan)


@contextlib.asynccontextmanager
async def embedded(
    engine: Engine, port: int | None, *, host: str = DEFAULT_HOST, metrics: ApiMetrics | None = None
) -> AsyncIterator[str | None]:
    """Serve the API on ``engine`` (already open) beside its owner, a worker or the console,
    on this loop, while inside; yields the address (None when ``port`` is None)."""
    if port is None:
        yield None
        return
    sock = _bind(host, port)
    app = create_app(engine, ApiSettings(), metrics=metrics)
    server = _Server(_config(app, Serve(host=host, port=port)), own_signals=False)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.01)
        if task.done():
            task.result()
            raise OmniPostError(f"the API on {host} port {port} stopped at start.")
        yield f"http://{host}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
