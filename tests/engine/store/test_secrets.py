"""Secrets at rest and on every output: encryption in the store, masking, key rotation."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import create_async_engine

from engine.core.crypto import SecretBox, mask, mask_mapping
from engine.core.errors import ConfigError, OmniPostError
from engine.store import NotificationRow, Store, masked_url, normalize_url
from engine.store.schema import metadata

T0 = 1_700_000_000.0
RECIPIENT = "alice.secret@example.com"
PROVIDER_SECRET = "hunter2-SECRET"
# Stored in plaintext on purpose: proves that a scan for the secrets would have seen them.
VISIBLE = "visible-marker-7f3a"


async def fill(store: Store) -> int:
    """A tenant, a provider with a secret, and one notification; returns its id."""
    cfg = store.config
    tenant = await cfg.tenant_add("acme", None, now=T0, actor="t")
    provider = await cfg.provider_add(
        "hook",
        "webhook",
        None,
        {"url": "https://x.example"},
        {"token": PROVIDER_SECRET},
        now=T0,
        actor="t",
    )
    await cfg.provider_update(
        "hook", secrets={"signing": PROVIDER_SECRET + "-2"}, now=T0, actor="t"
    )
    item = NotificationRow(provider.id, RECIPIENT, {"text": "hi"}, VISIBLE)
    [result] = await store.queue.enqueue(tenant.id, [item], now=T0)
    return result.id


async def raw_dump(url: str) -> str:
    """Every row of every table, as text, read straight from the database."""
    engine = create_async_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            parts = [
                repr(list(await conn.execute(sa.select(table)))) for table in metadata.sorted_tables
            ]
    finally:
        await engine.dispose()
    return "\n".join(parts)


async def test_no_plaintext_secret_in_any_column(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        await store.migrate()
        await fill(store)
    dump = await raw_dump(store_url)
    assert VISIBLE in dump
    assert RECIPIENT not in dump
    assert PROVIDER_SECRET not in dump
    assert "alice" not in dump and "hunter2" not in dump


async def test_stored_tokens_decrypt_to_the_secrets(store_url: str, box: SecretBox) -> None:
    async with Store(store_url, box) as store:
        await store.migrate()
        await fill(store)
    engine = create_async_engine(normalize_url(store_url))
    try:
        async with engine.connect() as conn:
            recipient = (
                await conn.execute(sa.text("SELECT recipient FROM notifications"))
            ).scalar_one()
            secrets = (await conn.execute(sa.text("SELECT secrets FROM providers"))).scalar_one()
    finally:
        await engine.dispose()
    assert box.decrypt(recipient) == RECIPIENT
    assert PROVIDER_SECRET in box.decrypt(secrets)


def sqlite_bytes(db: Path) -> bytes:
    """The database file and its -wal and -shm companions, whichever exist."""
    files = [p for p in db.parent.iterdir() if p.name.startswith(db.name)]
    assert db in files
    return b"".join(p.read_bytes() for p in sorted(files))


async def test_sqlite_files_hold_no_plaintext(tmp_path: Path, box: SecretBox) -> None:
    db = tmp_path / "omnipost.db"
    async with Store(f"sqlite:///{db}", box) as store:
        await store.migrate()
        await fill(store)
        # While open, the newest pages live in the WAL: check it as it is.
        assert (tmp_path / "omnipost.db-wal").exists()
        live = sqlite_bytes(db)
        assert VISIBLE.encode() in live
        assert RECIPIENT.encode() not in live
        assert PROVIDER_SECRET.encode() not in live

    # Closed: everything is checkpointed into the main file.
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    closed = sqlite_bytes(db)
    assert VISIBLE.encode() in db.read_bytes()
    for needle in (RECIPIENT, PROVIDER_SECRET, "alice.secret", "hunter2"):
        assert needle.encode() not in closed, needle


async def test_read_models_show_secrets_masked(store: Store) -> None:
    n_id = await fill(store)
    tenant = (await store.config.tenant("acme")).id
    view = await store.notifications.get(tenant, n_id)
    assert view is not None
    assert view.recipient_masked == "a***@e***.com"
    assert "alice" not in repr(view)
    listing = await store.notifications.list_by_tenant(tenant)
    assert "alice" not in repr(listing)

    provider = await store.config.provider("hook")
    assert provider.secrets == {} and provider.secret_names == ("signing", "token")
    full = await store.config.provider("hook", with_secrets=True)
    assert full.secrets["token"] == PROVIDER_SECRET
    assert PROVIDER_SECRET not in repr(full), "a record's repr never shows secret values"
    assert PROVIDER_SECRET not in repr(await store.audit.entries())

    [leased] = await store.queue.claim(tenant, provider.id, 1, owner="w", lease_s=5, now=T0)
    assert leased.recipient == RECIPIENT, "a worker gets the plaintext to send"
    assert RECIPIENT not in repr(leased)
    assert RECIPIENT not in repr(NotificationRow(1, RECIPIENT, {}, "k"))


# -- keys and rotation -----------------------------------------------------------------------


def test_rotation_reads_old_tokens_and_writes_with_the_newest_key() -> None:
    old_key, new_key = SecretBox.generate_key(), SecretBox.generate_key()
    old = SecretBox([old_key])
    token = old.encrypt(RECIPIENT)
    rotating = SecretBox([new_key, old_key])
    assert rotating.decrypt(token) == RECIPIENT

    rotated = rotating.rotate(token)
    assert SecretBox([new_key]).decrypt(rotated) == RECIPIENT
    assert SecretBox([new_key]).decrypt(rotating.encrypt("x")) == "x", "the first key encrypts"
    assert SecretBox.from_text(f" {new_key} ,, {old_key} ").decrypt(token) == RECIPIENT


def test_a_token_is_fresh_each_time_and_tampering_with_any_byte_is_refused() -> None:
    box = SecretBox([SecretBox.generate_key()])
    token = box.encrypt(RECIPIENT)
    assert box.encrypt(RECIPIENT) != token, "a random nonce per token"
    raw = base64.urlsafe_b64decode(token)
    assert raw[0] == 2 and len(raw) == 5 + 12 + len(RECIPIENT) + 16
    for index in (0, 1, 4, 5, 16, 17, len(raw) - 1):  # version, key id, nonce, text, tag
        bad = bytearray(raw)
        bad[index] ^= 0x01
        forged = base64.urlsafe_b64encode(bytes(bad)).decode()
        with pytest.raises(OmniPostError, match="cannot be decrypted"):
            box.decrypt(forged)
        assert not box.is_current(forged)


def test_fernet_tokens_of_the_earlier_format_are_read_and_rotated_into_the_current_one() -> None:
    old_key, new_key = SecretBox.generate_key(), SecretBox.generate_key()
    legacy = Fernet(old_key).encrypt(RECIPIENT.encode()).decode()
    same = SecretBox([old_key])
    assert same.decrypt(legacy) == RECIPIENT
    assert not same.is_current(legacy), "rotation rewrites it even under the same key"
    rotated = same.rotate(legacy)
    assert rotated != legacy and same.is_current(rotated) and same.decrypt(rotated) == RECIPIENT

    both = SecretBox([new_key, old_key])
    assert both.decrypt(legacy) == RECIPIENT
    assert not both.is_current(rotated), "the older key wrote it"
    assert SecretBox([new_key]).decrypt(both.rotate(legacy)) == RECIPIENT
    with pytest.raises(OmniPostError, match="OMNIPOST_KEYS"):
        SecretBox([new_key]).decrypt(legacy)


@pytest.mark.parametrize(
    "token",
    [
        SecretBox([SecretBox.generate_key()]).encrypt(RECIPIENT),  # another key
        Fernet(Fernet.generate_key()).encrypt(RECIPIENT.encode()).decode(),  # another, Fernet
        "not a token",
        "gAAAAA-truncated",
        "",
        "ünïcode",
    ],
)
def test_decrypting_without_the_key_says_what_to_check(token: str) -> None:
    box = SecretBox([SecretBox.generate_key()])
    with pytest.raises(OmniPostError, match=r"cannot be decrypted.*OMNIPOST_KEYS") as caught:
        box.decrypt(token)
    assert RECIPIENT not in str(caught.value)


def test_rotating_a_token_of_an_unknown_key_says_what_to_check() -> None:
    token = SecretBox([SecretBox.generate_key()]).encrypt(RECIPIENT)
    with pytest.raises(OmniPostError, match="OMNIPOST_KEYS"):
        SecretBox([SecretBox.generate_key()]).rotate(token)


async def test_store_reopened_with_rotated_keys(store_url: str) -> None:
    old_key, new_key = SecretBox.generate_key(), SecretBox.generate_key()
    async with Store(store_url, SecretBox([old_key])) as store:
        await store.migrate()
        n_id = await fill(store)
        tenant = (await store.config.tenant("acme")).id

    async with Store(store_url, SecretBox([new_key, old_key])) as store:
        view = await store.notifications.get(tenant, n_id)
        assert view is not None and view.recipient_masked == "a***@e***.com"
        assert (await store.config.provider("hook", with_secrets=True)).secrets[
            "token"
        ] == PROVIDER_SECRET

    async with Store(store_url, SecretBox([new_key])) as store:
        with pytest.raises(OmniPostError, match="OMNIPOST_KEYS"):
            await store.notifications.get(tenant, n_id)
        with pytest.raises(OmniPostError, match="OMNIPOST_KEYS"):
            await store.config.provider("hook")


@pytest.mark.parametrize(
    "keys",
    [[], ["short"], [b"not base64 at all!"], ["", SecretBox.generate_key()]],
)
def test_bad_keys_are_a_config_error(keys: list[str | bytes]) -> None:
    with pytest.raises(ConfigError):
        SecretBox(keys)


def test_box_repr_shows_no_key() -> None:
    key = SecretBox.generate_key()
    box = SecretBox([key, SecretBox.generate_key()])
    assert repr(box) == "SecretBox(keys=2)"
    assert key not in repr(box)


# -- masking ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("alice@example.com", "a***@e***.com"),
        (RECIPIENT, "a***@e***.com"),
        ("bob@mail.example.co.uk", "b***@m***.uk"),
        ("root@localhost", "r***@***"),
        ("@example.com", "***@e***.com"),
        ("a@b@example.com", "a***@e***.com"),
        ("+15551234567", "+1********67"),
        ("1234567", "12***67"),
        ("x" * 40, "xx********xx"),
        ("123456", "***"),
        ("", "***"),
        ("hunter2-SECRET", "hu********ET"),
        ("ünïcødé-vålue", "ün********ue"),
    ],
)
def test_mask(value: str, masked: str) -> None:
    assert mask(value) == masked


def test_mask_mapping_hides_every_value() -> None:
    assert mask_mapping({"token": PROVIDER_SECRET, "b": ""}) == {
        "token": "********",
        "b": "********",
    }


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        ("postgresql://omni:hunter2@db.example:5432/omnipost", "omni:***@db.example", "hunter2"),
        ("postgresql+asyncpg://u:p%40ss@h/db", "u:***@h/db", "p%40ss"),
        ("postgresql://omni@db.example/omnipost", "omni@db.example/omnipost", None),
        ("sqlite:////var/lib/omnipost.db", "sqlite:////var/lib/omnipost.db", None),
        ("::not a url::", "<invalid URL>", None),
        ("postgresql://omni:hunter2@db.example:x/omnipost", "<invalid URL>", "hunter2"),
    ],
)
def test_masked_url_hides_the_password(url: str, shown: str, hidden: str | None) -> None:
    text = masked_url(url)
    assert shown in text
    if hidden is not None:
        assert hidden not in text


async def test_store_repr_hides_the_password(box: SecretBox) -> None:
    async with Store("postgresql://omni:hunter2@db.example/omnipost", box) as store:
        assert "hunter2" not in repr(store) and "hunter2" not in store.url_masked
        assert "***" in store.url_masked
