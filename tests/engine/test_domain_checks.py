"""Input checks of the domain: a notification's recipient and idempotency key, and the
``UNSET`` sentinel."""

from __future__ import annotations

import copy
import pickle

import pytest

from engine.core.domain import (
    MAX_KEY_CHARS,
    UNSET,
    EnqueueItem,
    Unset,
    check_items,
    check_recipient_and_key,
    is_text,
)
from engine.core.errors import ConfigError, ItemRefused

LONE_SURROGATE = "\udcff"  # how Python keeps a byte it could not decode

# (recipient, key, None when accepted or what the ConfigError says)
CHECKS: list[tuple[str, str | None, str | None]] = [
    ("a@example.com", None, None),
    ("a@example.com", "k", None),
    ("a@example.com", "k" * MAX_KEY_CHARS, None),
    ("+15551234567", "ключ-✓", None),
    ("", None, "the recipient must not be empty"),
    ("", "", "the recipient must not be empty"),  # the first problem is the one told
    ("a@example.com", "", "an idempotency key must be 1 to 200 characters"),
    ("a@example.com", "k" * (MAX_KEY_CHARS + 1), "an idempotency key must be 1 to 200"),
    (f"a{LONE_SURROGATE}@example.com", None, "the recipient holds characters that are not"),
    ("a@example.com", f"k{LONE_SURROGATE}", "the idempotency key holds characters"),
    # A key too long is told before a recipient that is not text.
    (LONE_SURROGATE, "k" * (MAX_KEY_CHARS + 1), "an idempotency key must be"),
    (LONE_SURROGATE, LONE_SURROGATE, "the recipient holds"),
]


@pytest.mark.parametrize(("recipient", "key", "says"), CHECKS)
def test_recipient_and_key(recipient: str, key: str | None, says: str | None) -> None:
    if says is None:
        check_recipient_and_key(recipient, key)
    else:
        with pytest.raises(ConfigError, match=says):
            check_recipient_and_key(recipient, key)


@pytest.mark.parametrize(("recipient", "key", "says"), CHECKS)
def test_a_batch_is_told_what_its_first_failing_item_would_be(
    recipient: str, key: str | None, says: str | None
) -> None:
    good = [item("b@example.com", "k1"), item("c@example.com", None)]
    with pytest.raises(ItemRefused, match=says or "an idempotency key must be 1 to 200") as told:
        check_items([*good, item(recipient, key), item(LONE_SURROGATE, "")])
    assert told.value.index == (2 if says else 3)  # the item's place, from 0
    assert told.value.field == ("recipient" if "recipient" in told.value.reason else "key")
    assert told.value.message.startswith(f"item {told.value.index}, {told.value.field}: ")
    if says is None:
        check_items([*good, item(recipient, key)])


def item(recipient: str, key: str | None) -> EnqueueItem:
    return EnqueueItem("sms", recipient, {}, key)


def test_surrogates_split_across_a_batch_are_still_refused() -> None:
    with pytest.raises(ConfigError, match="item 0, recipient: the recipient holds"):
        check_items([item("a\ud83d", None), item("\ude00b", None)])
    check_items([])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("plain", True),
        ("naïve ✓ 🚀", True),
        (LONE_SURROGATE, False),
        ("a\ud800", False),
    ],
)
def test_is_text(text: str, expected: bool) -> None:
    assert is_text(text) is expected


def test_unset_is_one_object_that_survives_being_passed_along() -> None:
    assert UNSET is Unset.UNSET
    assert list(Unset) == [UNSET]
    assert copy.deepcopy(UNSET) is UNSET
    assert pickle.loads(pickle.dumps(UNSET)) is UNSET
    assert repr(UNSET) == "UNSET"
    assert UNSET is not None and bool(UNSET)
