"""The batch helpers of an enqueue give what their one-row forms give: a recipient encrypted
(``SecretBox.encrypt_many``), its digests (``SecretBox.digest_columns``), a made-up key
(``new_keys``)."""

from __future__ import annotations

import uuid

import pytest

from engine.api.notifications import new_keys
from engine.core.crypto import SecretBox

TEXTS = ["ada@example.com", "+15551234567", "naïve ✓ 🚀", "x" * 300, "a"]


@pytest.mark.parametrize("key_count", [1, 2, 3])
def test_encrypt_many_writes_what_encrypt_writes(key_count: int) -> None:
    box = SecretBox([SecretBox.generate_key() for _ in range(key_count)])
    tokens = box.encrypt_many(TEXTS)
    assert [box.decrypt(t) for t in tokens] == TEXTS
    assert all(box.is_current(t) for t in tokens)
    assert [len(t) for t in tokens] == [len(box.encrypt(text)) for text in TEXTS]
    assert len(set(box.encrypt_many(["same"] * 50))) == 50  # a nonce of its own each
    assert box.encrypt_many([]) == []


@pytest.mark.parametrize("key_count", [1, 2, 3])
def test_digest_columns_are_the_digests_by_key(key_count: int) -> None:
    box = SecretBox([SecretBox.generate_key() for _ in range(key_count)])
    columns = box.digest_columns(TEXTS)
    assert list(zip(*columns, strict=True)) == [box.digests(text) for text in TEXTS]
    assert box.digest_columns([]) == [[]] * key_count


@pytest.mark.parametrize("n", [0, 1, 2, 100])
def test_made_up_keys_are_random_uuids_in_hex(n: int) -> None:
    keys = new_keys(n)
    assert len(keys) == len(set(keys)) == n
    for key in keys:
        made = uuid.UUID(hex=key)
        assert (made.hex, made.version, made.variant) == (key, 4, uuid.RFC_4122)
