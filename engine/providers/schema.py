"""Each provider kind declares its options once; everything else reads the declaration.

A ``ProviderKind`` names its options and secrets as ``OptionSpec``s: type, default, whether
required, bounds, choices and a line of help. ``ProviderKind.read`` checks a configuration
against them (unknown names, required ones, types, ranges: one sentence naming the first bad
option, via ``Options``) and hands the provider typed values. The console's hints, the CLI's
``provider kinds`` and the options table of docs/providers.md come from the same declarations,
so they cannot drift from what a provider accepts.

``COMMON_OPTIONS`` are taken by every kind (the circuit breaker's, the default deadline); a
common option is one more entry there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engine.core.circuit import CircuitSettings
from engine.core.errors import ConfigError
from engine.providers._options import Options
from engine.providers.base import ProviderConfig, ProviderFactory

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_TTL_OPTION",
    "OptionSpec",
    "OptionType",
    "OptionValues",
    "ProviderKind",
]

OptionType = Literal["text", "number", "integer", "choice", "rate"]
Value = str | float | int | None


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option (or secret) of a kind. ``prefix``: a family of names, ``NAME`` standing for
    any suffix (``header.NAME``); such options are checked by the provider itself. Numbers lie
    in ``[low, high]`` (``(low, high]`` when ``above_low``); ``rate`` is a number from 0 to 1."""

    name: str
    type: OptionType = "text"
    default: Value = None
    required: bool = False
    secret: bool = False
    choices: tuple[str, ...] = ()
    low: float = 0.0
    high: float = math.inf
    above_low: bool = False
    prefix: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        if self.type == "integer" and not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"integer option {self.name!r} needs finite bounds")
        if self.type == "choice" and self.default not in self.choices:
            raise ValueError(f"choice option {self.name!r} needs a default among its choices")

    @property
    def stem(self) -> str:
        """What every name of a ``prefix`` option starts with (``header.``)."""
        return self.name.removesuffix("NAME")

    @property
    def type_text(self) -> str:
        """The type and its bounds in a few words: ``number above 0, at most 300``."""
        if self.secret:
            return "secret"
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        if self.type == "rate":
            return "number from 0 to 1"
        if self.type in ("number", "integer"):
            word = "number" if self.type == "number" else "whole number"
            if -self.low > 1e15 and self.high > 1e15:
                return word
            if self.above_low:
                low = f"above {_num(self.low)}"
            else:
                low = f"{'at least' if math.isinf(self.high) else 'from'} {_num(self.low)}"
            if math.isinf(self.high):
                return f"{word} {low}"
            joint = " to " if not self.above_low else ", at most "
            return f"{word} {low}{joint}{_num(self.high)}"
        return "text"

    @property
    def default_text(self) -> str:
        """``required``, the default as a user would type it, or empty."""
        if self.required:
            return "required"
        if self.default is None:
            return ""
        return _num(self.default) if isinstance(self.default, float | int) else self.default

    def hint(self) -> str:
        """One line for a tooltip or a listing: help, then type and default in brackets."""
        given = self.default_text
        default = given if self.required or not given else f"default {given}"
        head = "; ".join(p for p in (self.type_text, default) if p)
        return f"{self.help} ({head})" if self.help else head


def _num(value: float) -> str:
    """A bound or default as a user would type it: whole numbers in full."""
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"


def _circuit_options() -> tuple[OptionSpec, ...]:
    default = CircuitSettings()
    return (
        OptionSpec(
            "circuit_failures",
            "integer",
            default.failures,
            low=1,
            high=1000,
            help="provider-level failures in a row that open the provider's circuit",
        ),
        OptionSpec(
            "circuit_backoff_s",
            "number",
            default.backoff_s,
            above_low=True,
            high=86_400,
            help="seconds from opening to the first probe; doubles after each failed probe",
        ),
        OptionSpec(
            "circuit_backoff_max_s",
            "number",
            default.backoff_max_s,
            high=86_400,
            help="the longest wait between probes (not below circuit_backoff_s)",
        ),
    )


# The deadline, in seconds after their send time, of the notifications through this provider
# that name none and whose tenant sets none (engine/core/lifetime.py).
DEFAULT_TTL_OPTION = "default_ttl_s"

COMMON_OPTIONS: tuple[OptionSpec, ...] = (
    *_circuit_options(),
    OptionSpec(
        DEFAULT_TTL_OPTION,
        "number",
        None,
        above_low=True,
        high=35 * 86_400,
        help="the deadline, in seconds after their send time, of notifications that name none "
        "(a tenant's default comes first); none by default",
    ),
)


class OptionValues:
    """A checked configuration's values, typed as their specs say. Asking for a name that is
    not declared, or as another type, is a programming error (``KeyError``, ``TypeError``)."""

    def __init__(self, options: Options, values: Mapping[str, Value]) -> None:
        self.config = options.config
        self._options = options
        self._values = dict(values)

    def fail(self, key: str, problem: str) -> ConfigError:
        """A ``ConfigError`` saying: provider NAME: option KEY PROBLEM."""
        return self._options.fail(key, problem)

    def text(self, name: str) -> str:
        """A text or choice option, or a secret; ``""`` when absent and without a default."""
        value = self._values[name]
        if value is None:
            return ""
        if not isinstance(value, str):
            raise TypeError(f"option {name!r} is not text")
        return value

    def number(self, name: str) -> float:
        value = self._values[name]
        if not isinstance(value, float | int):
            raise TypeError(f"option {name!r} is not a number")
        return float(value)

    def integer(self, name: str) -> int | None:
        """A whole number, or None when absent and without a default."""
        value = self._values[name]
        if value is not None and not isinstance(value, int):
            raise TypeError(f"option {name!r} is not a whole number")
        return value


@dataclass(frozen=True, slots=True)
class ProviderKind:
    """A kind of provider: its name, a line about it, its own options (secrets included), and
    the factory that builds one (``BUILTIN_KINDS`` holds the factories by name)."""

    name: str
    summary: str
    own_options: tuple[OptionSpec, ...]
    factory: ProviderFactory

    @property
    def options(self) -> tuple[OptionSpec, ...]:
        """Every option and secret this kind takes: its own, then the common ones."""
        return self.own_options + COMMON_OPTIONS

    def read(self, config: ProviderConfig) -> OptionValues:
        """Check ``config`` against the declaration and return its values; raises
        ``ConfigError`` naming the first unknown or bad option."""
        opts = Options(config)
        plain = [s for s in self.options if not s.secret]
        secrets = [s for s in self.options if s.secret]
        stems = {s.stem for s in self.options if s.prefix}
        if len(stems) > 1:
            raise ValueError(f"kind {self.name!r} declares more than one family of names")
        opts.check_known(
            [s.name for s in plain if not s.prefix],
            [s.name for s in secrets if not s.prefix],
            prefix=next(iter(stems), None),
        )
        values: dict[str, Value] = {}
        for spec in self.options:
            if not spec.prefix:
                values[spec.name] = _read(opts, spec)
        _circuit(OptionValues(opts, values))  # its options must agree with one another
        return OptionValues(opts, values)


def circuit_settings(config: ProviderConfig) -> CircuitSettings:
    """A provider's circuit-breaker settings (``COMMON_OPTIONS``), defaults for those not
    given; raises ``ConfigError`` naming a bad one."""
    opts = Options(config)
    return _circuit(OptionValues(opts, {s.name: _read(opts, s) for s in COMMON_OPTIONS}))


def _circuit(values: OptionValues) -> CircuitSettings:
    first_s, max_s = values.number("circuit_backoff_s"), values.number("circuit_backoff_max_s")
    if max_s < first_s:
        if "circuit_backoff_max_s" in values.config.options:
            raise values.fail("circuit_backoff_max_s", "must not be below circuit_backoff_s")
        max_s = first_s  # only the first back-off was given, and it is above the default most
    return CircuitSettings(values.integer("circuit_failures") or 1, first_s, max_s)


def _read(opts: Options, spec: OptionSpec) -> Value:
    if spec.secret:
        secret = opts.config.secrets.get(spec.name, "")
        if spec.required and not secret:
            raise ConfigError(f"provider {opts.config.name!r}: secret {spec.name!r} is required.")
        return secret or None
    name, default = spec.name, spec.default
    if spec.type == "text":
        return opts.text(name, None if spec.required else str(default or ""))
    if spec.type == "choice":
        return opts.choice(name, str(default), spec.choices)
    if spec.type == "integer":
        low, high = int(spec.low), int(spec.high)
        return opts.integer(name, None if default is None else int(default), low=low, high=high)
    number = float(default or 0.0)
    if spec.type == "rate":
        return opts.number(name, number, low=0.0, high=1.0)
    return opts.number(name, number, low=spec.low, high=spec.high, above_low=spec.above_low)
