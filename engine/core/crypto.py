"""Secrets at rest: authenticated encryption under rotating keys, and masking.

A token is written as ``base64url(0x02 | key id (4) | nonce (12) | ciphertext and tag)``:
AES-256-GCM-SIV (RFC 8452) under a key derived with HKDF-SHA256 from one of the configured
keys, the first five bytes bound in as associated data. GCM-SIV, not plain GCM, because the
nonces are random and a busy queue encrypts billions of recipients under one key: a repeated
nonce under GCM-SIV reveals only whether two plaintexts were equal, where under GCM it would give
away the authentication key. The key id (also derived, never the key) picks the key to decrypt
with. Tokens of the earlier Fernet format (``0x80 | ...``, written before this one) are still
read under the same keys; ``rotate`` rewrites them in the current one. A key is 32 url-safe
base64-encoded bytes, as Fernet's, so key files and ``OMNIPOST_KEYS`` stay as they were.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine.core.errors import ConfigError, SecretUnreadable
from engine.core.present import masked_secrets

__all__ = ["SecretBox", "mask", "mask_mapping"]

_VERSION = b"\x02"
_HEADER = 5  # version and key id: the associated data
_NONCE = 12
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64's alphabet to its url-safe one


def _derive(key: bytes, purpose: bytes, length: int) -> bytes:
    """``length`` bytes for ``purpose`` from a configured key (32 raw bytes)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose)
    return hkdf.derive(key)


class _Key:
    """One configured key: its cipher and its id, and the Fernet that reads older tokens."""

    __slots__ = ("cipher", "fernet", "header", "mac", "mac_key")

    def __init__(self, key: str | bytes) -> None:
        self.fernet = Fernet(key)  # raises for a key that is not 32 url-safe base64 bytes
        raw = base64.urlsafe_b64decode(key)
        self.cipher = AESGCMSIV(_derive(raw, b"omnipost secret box: aes-256-gcm-siv", 32))
        self.header = _VERSION + _derive(raw, b"omnipost secret box: key id", 4)
        self.mac_key = _derive(raw, b"omnipost secret box: digest", 32)
        # Keyed once: a copy of it per digest skips hashing the key's block again (a third
        # of a digest's time).
        self.mac = hashlib.blake2b(key=self.mac_key, digest_size=32)


class SecretBox:
    """Encrypts and decrypts short strings; the first key encrypts, every key decrypts.

    ``source`` says where the keys came from (``OMNIPOST_KEYS``, ``the key file PATH``), for
    messages that must tell an operator which keys to fix; it is never a key."""

    __slots__ = ("_by_header", "_count", "_fernet", "_keys", "_newest", "source")

    def __init__(self, keys: Sequence[str | bytes], *, source: str = "") -> None:
        if not keys:
            raise ConfigError("at least one encryption key is needed.")
        try:
            parsed = [_Key(k) for k in keys]
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "an encryption key is not valid; each must be 32 url-safe base64-encoded bytes."
            ) from exc
        self._newest = parsed[0]
        self._keys = tuple(parsed)
        self._by_header: dict[bytes, list[_Key]] = {}
        for key in parsed:  # two keys may share an id (1 in 2**32): both are tried
            self._by_header.setdefault(key.header, []).append(key)
        self._fernet = MultiFernet([key.fernet for key in parsed])
        self._count = len(parsed)
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
        key = self._newest
        nonce = os.urandom(_NONCE)
        sealed = key.cipher.encrypt(nonce, plaintext.encode("utf-8"), key.header)
        return base64.urlsafe_b64encode(key.header + nonce + sealed).decode("ascii")

    def encrypt_many(self, plaintexts: Sequence[str]) -> list[str]:
        """``encrypt`` of each of ``plaintexts``, in order: what an enqueue of many rows pays,
        with one read of the system's random source for every nonce and no lookup per row."""
        key = self._newest
        header, seal, b64 = key.header, key.cipher.encrypt, binascii.b2a_base64
        nonces = os.urandom(_NONCE * len(plaintexts))
        tokens = []
        for start, text in zip(range(0, len(nonces), _NONCE), plaintexts, strict=True):
            nonce = nonces[start : start + _NONCE]
            raw = header + nonce + seal(nonce, text.encode("utf-8"), header)
            tokens.append(b64(raw, newline=False).translate(_URLSAFE).decode("ascii"))
        return tokens

    def decrypt(self, token: str) -> str:
        """Raises ``SecretUnreadable`` when no configured key opens ``token``."""
        try:
            raw = base64.urlsafe_b64decode(token)
        except (binascii.Error, ValueError) as exc:  # not base64, or not ASCII
            raise _undecryptable() from exc
        if raw[:1] != _VERSION:
            return self._decrypt_fernet(token)
        header = raw[:_HEADER]
        nonce, sealed = raw[_HEADER : _HEADER + _NONCE], raw[_HEADER + _NONCE :]
        for key in self._by_header.get(header, ()):
            try:
                return key.cipher.decrypt(nonce, sealed, header).decode("utf-8")
            except (InvalidTag, ValueError):
                continue
        raise _undecryptable()

    def _decrypt_fernet(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (InvalidToken, ValueError) as exc:
            raise _undecryptable() from exc

    def digest(self, plaintext: str) -> str:
        """A keyed digest of ``plaintext`` (BLAKE2b in its keyed mode, a MAC, under a key
        derived from the newest key; 32 bytes, hex): equal plaintexts give equal digests, so a
        secret can be looked up without being stored in the clear, and without the keys nobody
        can test a guess against it. Keyed BLAKE2b rather than HMAC-SHA256: a third of the
        time (0.6 against 2 us here), paid on every enqueue."""
        return _mac(self._newest.mac_key, plaintext.encode("utf-8"))

    def digests(self, plaintext: str) -> tuple[str, ...]:
        """``digest`` under every configured key, the newest first: what a lookup must try
        while ``keys rotate`` has not yet recomputed the digests made under an older key."""
        data = plaintext.encode("utf-8")
        return tuple(_mac(key.mac_key, data) for key in self._keys)

    def digest_columns(self, plaintexts: Sequence[str]) -> list[list[str]]:
        """``digests`` of each of ``plaintexts``, as columns: per configured key (the newest
        first), the digest of every plaintext under it, in order."""
        data = [text.encode("utf-8") for text in plaintexts]
        return [[_digest(key.mac.copy(), d) for d in data] for key in self._keys]

    def rotate(self, token: str) -> str:
        """Re-encrypt ``token`` under the newest key, in the current format; raises as
        ``decrypt`` does."""
        return self.encrypt(self.decrypt(token))

    def is_current(self, token: str) -> bool:
        """Whether the newest key wrote ``token`` in the current format, so ``rotate`` would
        gain nothing. Authenticates it under that key alone; False for a token of any other
        key or format and for one no key can read."""
        key = self._newest
        try:
            raw = base64.urlsafe_b64decode(token)
            if raw[:_HEADER] != key.header:
                return False
            key.cipher.decrypt(raw[_HEADER : _HEADER + _NONCE], raw[_HEADER + _NONCE :], key.header)
        except (binascii.Error, InvalidTag, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        source = f", source={self.source!r}" if self.source else ""
        return f"SecretBox(keys={self._count}{source})"


def _digest(keyed: hashlib.blake2b, data: bytes) -> str:
    keyed.update(data)
    return keyed.hexdigest()


def _mac(key: bytes, data: bytes) -> str:
    return hashlib.blake2b(data, key=key, digest_size=32).hexdigest()


def _undecryptable() -> SecretUnreadable:
    return SecretUnreadable(
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
