"""The values the command line's flags take, each checked as it is read (a bad one is a usage
error: one sentence, exit 2), and the flags several commands share (``--redis``, the metrics
endpoint's)."""

from __future__ import annotations

import argparse
import os

from app.metrics_address import DEFAULT_HOST, PORT_ENV, parse_port
from engine import ConfigError, parse_age

__all__ = [
    "age",
    "key_value",
    "metrics_args",
    "non_negative_int",
    "number",
    "port",
    "positive_int",
    "redis_arg",
    "seconds",
    "seconds_or_zero",
    "whole_number",
]


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:40]!r}")
    return key, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None


def number(text: str) -> float:
    """Any number; what it may be is checked where it is used."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None


def seconds(text: str, *, zero_ok: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:40]!r}") from None
    if not (0 <= value < 1e7 if zero_ok else 0 < value < 1e7):
        least = "0 or more" if zero_ok else "above 0"
        raise argparse.ArgumentTypeError(f"must be a number of seconds {least}, got {text[:40]!r}")
    return value


def seconds_or_zero(text: str) -> float:
    return seconds(text, zero_ok=True)


def age(text: str) -> float | None:
    """An AGE such as ``12h`` or ``7d`` in seconds; ``0`` keeps forever (None)."""
    try:
        return parse_age(text)
    except ConfigError as exc:  # the parser adds "(see --help)." after the sentence
        raise argparse.ArgumentTypeError(exc.message.rstrip(".")) from None


def redis_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        metavar="URL",
        default=os.environ.get("OMNIPOST_REDIS") or None,
        help="redis://... to share rate limits with other workers (default: $OMNIPOST_REDIS,"
        " else limits are kept in this process)",
    )


def port(text: str) -> int:
    try:
        return parse_port(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def metrics_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help=f"serve Prometheus metrics on this port (default: ${PORT_ENV}, else none)",
    )
    p.add_argument(
        "--metrics-host",
        metavar="HOST",
        help=f"the address to serve them on (default: {DEFAULT_HOST}, this host only)",
    )
