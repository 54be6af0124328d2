"""The batch helpers of an enqueue give what their one-row forms give: a recipient encrypted
(``SecretBox.encrypt_many``), its digests (``SecretBox.digest_columns``), a made-up key
(``new_keys``), a payload written as JSON (``payload_texts``)."""

from __future__ import annotations

import json
import math
import time
import uuid

import pytest

from engine import EnqueueItem, ItemRefused
from engine.core.crypto import SecretBox
from engine.facade.notifications import new_keys
from engine.store.payloads import payload_texts
from testkit.stores import EngineFactory

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
def test_made_up_keys_are_version_7_uuids_in_hex(n: int) -> None:
    before = time.time_ns() // 1_000_000
    keys = new_keys(n)
    after = time.time_ns() // 1_000_000
    assert len(keys) == len(set(keys)) == n
    for key in keys:
        made = uuid.UUID(hex=key)
        assert (made.hex, made.version, made.variant) == (key, 7, uuid.RFC_4122)
        assert before <= int(key[:12], 16) <= after  # the time they were made, in ms


def test_made_up_keys_sort_in_the_order_they_were_made() -> None:
    first = new_keys(50)
    time.sleep(0.002)
    second = new_keys(50)
    assert max(first) < min(second)  # a later millisecond sorts after
    ones = {key[12:] for key in first} | {key[12:] for key in second}
    assert len(ones) == 100  # and the rest is random: no two alike


PAYLOADS = [
    {},
    {"subject": "hi", "n": 1},
    {"text": "naïve ✓ 🚀", "quote": 'say "hi"\\n', "nested": {"a": [1, 2.5, None, True]}},
    {"big": 10**30, "small": 1e-7, "neg": -0.0, "list": list(range(50))},
    {"control": "\x00\x1f\u2028"},
    ["not", "a", "dict"],
]


def test_payload_texts_read_back_as_json_writes_them() -> None:
    texts = payload_texts(PAYLOADS)
    assert [json.loads(t) for t in texts] == [json.loads(json.dumps(p)) for p in PAYLOADS]
    assert payload_texts([]) == []


def test_payload_texts_keep_what_only_json_could_write() -> None:
    lone, odd = payload_texts([{"s": "\udcff"}, {"nan": math.nan, "inf": -math.inf}])
    assert lone == '{"s":"\\udcff"}'  # escaped, as json writes it: there is no UTF-8 for it
    read = json.loads(odd)
    assert math.isnan(read["nan"]) and read["inf"] == -math.inf
    with pytest.raises(TypeError):  # as before: what JSON has no form for is refused
        payload_texts([{"x": object()}])


async def test_an_item_refused_is_named_by_its_place_and_field_and_nothing_is_written(
    make_engine: EngineFactory,
) -> None:
    engine = await make_engine()
    await engine.tenant_add("acme")
    await engine.provider_add("sms", "simulated")
    good = EnqueueItem("sms", "+15550000001", {"text": "hi"}, "k1")

    with pytest.raises(ItemRefused) as unknown:
        await engine.enqueue_many(
            "acme", [good, good._replace(key="k2"), good._replace(provider="fax")]
        )
    with pytest.raises(ItemRefused) as empty:
        await engine.enqueue_many("acme", [good, good._replace(recipient="", key="k4")])

    assert (unknown.value.index, unknown.value.field) == (2, "provider")
    assert unknown.value.message == "item 2, provider: there is no provider named 'fax'."
    assert (empty.value.index, empty.value.field) == (1, "recipient")
    assert await engine.notifications("acme") == []  # neither batch wrote anything
    [queued] = await engine.enqueue_many("acme", [good])  # a tuple with names, all the way
    assert not queued.duplicate and queued.idempotency_key == "k1"
