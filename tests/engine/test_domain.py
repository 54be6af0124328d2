"""Domain values: rates as people write them, limits, and tenant and provider names."""

from __future__ import annotations

import math

import pytest

from engine.core.domain import Limit, parse_rate, validate_name
from engine.core.errors import ConfigError

# (text, tokens per second)
RATES: list[tuple[str, float]] = [
    ("5", 5.0),
    ("5/s", 5.0),
    ("5/sec", 5.0),
    (" 5 / s ", 5.0),
    ("2.5", 2.5),
    (".5", 0.5),
    ("0.001", 0.001),
    ("1e3", 1000.0),
    ("1E-2/s", 0.01),
    ("300/min", 5.0),
    ("300/m", 5.0),
    ("90/min", 1.5),
    ("1000/h", 1000 / 3600),
    ("3600/hr", 1.0),
    ("7200 / h", 2.0),
    ("5\n", 5.0),
]


@pytest.mark.parametrize(("text", "rate_per_s"), RATES)
def test_parse_rate(text: str, rate_per_s: float) -> None:
    assert parse_rate(text) == pytest.approx(rate_per_s)


# (text, what the message says)
BAD_RATES: list[tuple[str, str]] = [
    ("", "cannot read"),
    ("   ", "cannot read"),
    ("fast", "cannot read"),
    ("5/d", "cannot read"),
    ("5/S", "cannot read"),
    ("5/", "cannot read"),
    ("/s", "cannot read"),
    ("5 5", "cannot read"),
    ("5.", "cannot read"),
    ("-5", "cannot read"),
    ("+5", "cannot read"),
    ("5/min/s", "cannot read"),
    ("nan", "cannot read"),
    ("NaN/s", "cannot read"),
    ("inf", "cannot read"),
    ("-inf", "cannot read"),
    ("infinity", "cannot read"),
    ("\uff15", "cannot read"),  # a full-width digit
    ("0", "above 0"),
    ("0/s", "above 0"),
    ("0.0/min", "above 0"),
    ("1e-400", "above 0"),  # rounds to zero
    ("1e400", "finite"),  # rounds to infinity
    ("x" * 500, "cannot read"),
]


@pytest.mark.parametrize(("text", "says"), BAD_RATES)
def test_parse_rate_refuses(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        parse_rate(text)
    message = str(caught.value)
    assert "N/min" in message or "above 0" in message
    assert len(message) < 120, "the bad text is cut short in the message"


# (rate_per_s, burst) that make a usable bucket
GOOD_LIMITS: list[tuple[float, float]] = [(1, 1), (0.001, 1), (2.5, 1.5), (1e6, 1e9)]
# (rate_per_s, burst, which one the message names)
BAD_LIMITS: list[tuple[object, object, str]] = [
    (0, 1, "rate"),
    (-1, 1, "rate"),
    (math.nan, 1, "rate"),
    (math.inf, 1, "rate"),
    (-math.inf, 1, "rate"),
    ("5", 1, "rate"),
    (None, 1, "rate"),
    (1, 0.999, "burst"),
    (1, 0, "burst"),
    (1, -1, "burst"),
    (1, math.nan, "burst"),
    (1, math.inf, "burst"),
    (1, "10", "burst"),
]


@pytest.mark.parametrize(("rate_per_s", "burst"), GOOD_LIMITS)
def test_limit_accepts(rate_per_s: float, burst: float) -> None:
    limit = Limit(rate_per_s, burst)
    assert (limit.rate_per_s, limit.burst) == (rate_per_s, burst)


@pytest.mark.parametrize(("rate_per_s", "burst", "names"), BAD_LIMITS)
def test_limit_refuses(rate_per_s: object, burst: object, names: str) -> None:
    with pytest.raises(ConfigError, match=f"^{names} must be") as caught:
        Limit(rate_per_s, burst)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError), "a ConfigError is also a ValueError"


def test_limit_reads_well() -> None:
    assert str(Limit(2.5, 10)) == "2.5/s burst 10"
    assert Limit(1, 2) == Limit(1.0, 2.0)


VALID_NAMES = ["acme", "a", "A", "0", "acme-eu.1_b", "0day", "x" * 63, "UPPER.lower", "acme--"]
INVALID_NAMES = [
    "",
    "-acme",
    "_acme",
    ".acme",
    "acme corp",
    " acme",
    "acme ",
    "acme\n",
    "acme\r\n",
    "acme\t",
    "acme\x00",
    "a/b",
    "a\\b",
    "a:b",
    "a@b",
    "x" * 64,
    "x" * 1000,
    "acmé",
    "é",
    "\uff41cme",  # full-width a
    "\u0430cme",  # Cyrillic a
    "tenant🙂",
    "acme'; DROP TABLE tenants; --",
    "' OR '1'='1",
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_validate_name_accepts(name: str) -> None:
    assert validate_name("tenant", name) == name


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_validate_name_refuses(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^provider name .* is not valid; use 1-63") as caught:
        validate_name("provider", name)
    assert len(str(caught.value)) < 160, "a long name is cut short in the message"
