"""Secrets at rest: MultiFernet encryption (newest key first, so keys rotate) and masking."""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from engine.errors import ConfigError, OmniPostError
from engine.present import masked_secrets

__all__ = ["SecretBox", "mask", "mask_mapping"]


class SecretBox:
    """Encrypts and decrypts short strings; the first key encrypts, every key decrypts.

    ``source`` says where the keys came from (``OMNIPOST_KEYS``, ``the key file PATH``), for
    messages that must tell an operator which keys to fix; it is never a key."""

    __slots__ = ("_count", "_fernet", "_newest", "source")

    def __init__(self, keys: Sequence[str | bytes], *, source: str = "") -> None:
        if not keys:
            raise ConfigError("at least one encryption key is needed.")
        try:
            fernets = [Fernet(k) for k in keys]
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "an encryption key is not valid; each must be 32 url-safe base64-encoded bytes."
            ) from exc
        self._fernet = MultiFernet(fernets)
        self._newest = fernets[0]
        self._count = len(fernets)
        self.source = source

    @property
    def key_count(self) -> int:
        return self._count

    def describe_keys(self) -> str:
        """``the 2 keys in OMNIPOST_KEYS``, ``the 1 key in the key file PATH``, or, without a
        source, ``the 2 configured keys``."""
        plural = "" if self._count == 1 else "s"
        if self.source:
            return f"the {self._count} key{plural} in {self.source}"
        return f"the {self._count} configured key{plural}"

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode("ascii")

    @classmethod
    def from_text(cls, text: str, *, source: str = "") -> SecretBox:
        """Keys as in ``OMNIPOST_KEYS``: comma separated, newest first."""
        return cls([k.strip() for k in text.split(",") if k.strip()], source=source)

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str:
        """Raises ``OmniPostError`` when no configured key opens ``token``."""
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (InvalidToken, ValueError) as exc:
            raise _undecryptable() from exc

    def rotate(self, token: str) -> str:
        """Re-encrypt ``token`` under the newest key; raises as ``decrypt`` does."""
        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, ValueError) as exc:
            raise _undecryptable() from exc

    def is_current(self, token: str) -> bool:
        """Whether the newest key wrote ``token``, so ``rotate`` would gain nothing. Checks the
        token's signature under that key alone (an HMAC, no decryption); False for a token of
        any other key and for one no key can read."""
        try:
            self._newest.extract_timestamp(token.encode("ascii"))
        except (InvalidToken, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        source = f", source={self.source!r}" if self.source else ""
        return f"SecretBox(keys={self._count}{source})"


def _undecryptable() -> OmniPostError:
    return OmniPostError(
        "a stored secret cannot be decrypted with the configured keys; "
        "check OMNIPOST_KEYS or the key file."
    )


def mask(value: str) -> str:
    """Show enough of a secret to recognise it and no more.

    ``alice@example.com`` -> ``a***@e***.com``; ``+15551234567`` -> ``+1********67``;
    anything of 6 characters or fewer -> ``***``.
    """
    if "@" in value:
        local, _, domain = value.rpartition("@")
        host, dot, tld = domain.rpartition(".")
        shown_host = (host[:1] + "***" + dot + tld) if host else "***"
        return (local[:1] or "") + "***@" + shown_host
    if len(value) <= 6:
        return "***"
    return value[:2] + "*" * min(len(value) - 4, 8) + value[-2:]


def mask_mapping(secrets: dict[str, str]) -> dict[str, str]:
    """Secret names with their values hidden entirely, for listings."""
    return masked_secrets(secrets)
