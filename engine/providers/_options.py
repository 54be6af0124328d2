"""Reading a ``ProviderConfig``'s string options, with one clear sentence for each mistake.

Every message names the provider and the option. Option values are shown (shortened); secret
values never are: a secret is only ever named.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from engine.core.errors import ConfigError
from engine.providers.base import ProviderConfig

__all__ = ["Options", "redact"]


def _shown(value: str) -> str:
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


class Options:
    """Typed reads of one provider's options; each raises ``ConfigError`` naming the option."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config

    def fail(self, key: str, problem: str) -> ConfigError:
        """A ``ConfigError`` saying: provider NAME: option KEY PROBLEM."""
        return ConfigError(f"provider {self.config.name!r}: option {key!r} {problem}.")

    def check_known(
        self, options: Iterable[str], secrets: Iterable[str] = (), prefix: str | None = None
    ) -> None:
        """Refuse options and secrets this kind does not know (most likely a typo)."""
        allowed = set(options)
        for key in self.config.options:
            if key not in allowed and not (prefix and key.startswith(prefix)):
                raise self.fail(key, f"is not known to a {self.config.kind} provider")
        allowed_secrets = set(secrets)
        for key in self.config.secrets:
            if key not in allowed_secrets and not (prefix and key.startswith(prefix)):
                raise ConfigError(
                    f"provider {self.config.name!r}: secret {key!r} is not known to a "
                    f"{self.config.kind} provider."
                )

    def text(self, key: str, default: str | None = None) -> str:
        """The option as given (stripped); required when ``default`` is None."""
        value = self.config.options.get(key, "").strip()
        if value:
            return value
        if default is None:
            raise self.fail(key, "is required")
        return default

    def number(
        self,
        key: str,
        default: float,
        *,
        low: float = 0.0,
        high: float = math.inf,
        above_low: bool = False,
    ) -> float:
        """A finite float in ``[low, high]`` (``(low, high]`` when ``above_low``)."""
        raw = self.config.options.get(key, "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        too_low = value <= low if above_low else value < low
        if not math.isfinite(value) or too_low or value > high:
            bound = "above" if above_low else "at least"
            upto = "" if math.isinf(high) else f" and at most {high:g}"
            raise self.fail(key, f"must be a number {bound} {low:g}{upto}, not {_shown(raw)}")
        return value

    def rate(self, key: str) -> float:
        """A probability from 0 to 1, default 0."""
        return self.number(key, 0.0, low=0.0, high=1.0)

    def integer(self, key: str, default: int | None, *, low: int, high: int) -> int | None:
        """A whole number in ``[low, high]``, or ``default`` when absent."""
        raw = self.config.options.get(key, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise self.fail(
                key, f"must be a whole number from {low} to {high}, not {_shown(raw)}"
            ) from None
        if not low <= value <= high:
            raise self.fail(key, f"must be a whole number from {low} to {high}, not {value}")
        return value

    def choice(self, key: str, default: str, choices: Iterable[str]) -> str:
        """One of ``choices`` (case-insensitive)."""
        allowed = tuple(choices)
        value = self.text(key, default).lower()
        if value not in allowed:
            raise self.fail(key, f"must be one of {', '.join(allowed)}, not {_shown(value)}")
        return value


def redact(text: str, *recipients: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters, with each of ``recipients`` masked.

    Providers pass server replies through this so that a recipient echoed back by a server
    never ends up in a detail string, a log or the console. Matching ignores case.
    """
    for recipient in recipients:
        if not recipient:
            continue
        text = re.sub(re.escape(recipient), "<recipient>", text, flags=re.IGNORECASE)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
