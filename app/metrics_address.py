"""Where ``omnipost worker --metrics-port PORT [--metrics-host HOST]`` (and the console) serve
their metrics: the flags and ``$OMNIPOST_METRICS_PORT`` read into a ``MetricsAddress``. Apart
from ``app.metrics`` so that the command line parses its flags without the Prometheus client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from engine import ConfigError

__all__ = ["DEFAULT_HOST", "PORT_ENV", "MetricsAddress", "metrics_address", "parse_port"]

DEFAULT_HOST = "127.0.0.1"  # this host only, unless --metrics-host says otherwise
PORT_ENV = "OMNIPOST_METRICS_PORT"


@dataclass(frozen=True, slots=True)
class MetricsAddress:
    """Where the endpoint listens."""

    port: int
    host: str = DEFAULT_HOST

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def parse_port(text: str) -> int:
    """A TCP port from 1 to 65535; ConfigError (one sentence, without the full stop that the
    parser adds) otherwise."""
    try:
        port = int(text.strip())
    except ValueError:
        raise ConfigError(f"expected a port number, got {text[:40]!r}") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"a port must be from 1 to 65535, got {port}")
    return port


def metrics_address(
    port: int | None, host: str | None, environ: Mapping[str, str] = os.environ
) -> MetricsAddress | None:
    """The endpoint ``--metrics-port``/``--metrics-host`` ask for, the port defaulting to
    ``$OMNIPOST_METRICS_PORT``; None when neither gives a port. Raises ConfigError for a bad
    ``$OMNIPOST_METRICS_PORT`` or a host without a port."""
    if port is None and environ.get(PORT_ENV, "").strip():
        try:
            port = parse_port(environ[PORT_ENV])
        except ConfigError as exc:
            raise ConfigError(f"{PORT_ENV}: {exc.message}.") from None
    if port is None:
        if host is not None:
            raise ConfigError(f"--metrics-host needs --metrics-port (or {PORT_ENV}).")
        return None
    return MetricsAddress(port, host or DEFAULT_HOST)
