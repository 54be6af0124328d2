"""Each provider kind declares its options; validation, the CLI, the console's hints and the
options table of docs/providers.md all come from that one declaration."""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path
from typing import cast

import pytest
from pytestqt.qtbot import QtBot

from app.docs import page_table, provider_options_table
from engine import (
    BUILTIN_KINDS,
    COMMON_OPTIONS,
    PROVIDER_KINDS,
    ConfigError,
    OptionSpec,
    Provider,
    ProviderConfig,
)
from testkit.apple import PEM as P8
from testkit.cli import REPO, Cli, assert_one_sentence
from testkit.google import ACCOUNT
from testkit.ui import OFFSCREEN_NOISE, console

PROVIDERS_PAGE = REPO / "docs" / "providers.md"
# Enough for every kind to build: its required options and nothing else.
MINIMAL = {
    "simulated": {},
    "file": {"path": "out.jsonl"},
    "webhook": {"url": "https://hooks.example.com/in"},
    "smtp": {"host": "smtp.example.com", "from": "me@example.com"},
    "twilio": {"account_sid": "AC" + "0" * 32, "from": "+15550001111"},
    "fcm": {"project_id": "demo"},
    "apns": {"team_id": "TEAM123456", "key_id": "KEYID12345", "topic": "com.example.app"},
}
MINIMAL_SECRETS = {
    "twilio": {"auth_token": "t"},
    "fcm": {"service_account": ACCOUNT},
    "apns": {"signing_key": P8},
}
# Options a kind needs one of, none of them required alone.
EITHER = {"twilio": {"from"}}


def test_the_providers_page_table_is_the_generated_one() -> None:
    assert page_table(PROVIDERS_PAGE.read_text(encoding="utf-8")) == provider_options_table(), (
        "docs/providers.md's options table is stale: paste `python -m app.docs "
        "provider-options` between its provider-options markers"
    )


@pytest.mark.parametrize("name", list(PROVIDER_KINDS))
def test_the_registry_builds_with_the_declared_factory(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = cast(Provider, object())
    declared = dataclasses.replace(PROVIDER_KINDS[name], factory=lambda _config: built)
    monkeypatch.setattr(importlib.import_module(f"engine.providers.{name}"), "SPEC", declared)
    assert BUILTIN_KINDS[name](ProviderConfig("p", name, {})) is built


def test_the_registry_holds_every_kind_with_its_factory() -> None:
    assert list(PROVIDER_KINDS) == list(BUILTIN_KINDS)
    for name, kind in PROVIDER_KINDS.items():
        assert kind.name == name
        assert kind.options[-len(COMMON_OPTIONS) :] == COMMON_OPTIONS
        assert {s.name for s in COMMON_OPTIONS} >= {"circuit_failures", "circuit_backoff_s"}
        needed = set(MINIMAL[name]) - EITHER.get(name, set()) | set(MINIMAL_SECRETS.get(name, {}))
        assert needed == {s.name for s in kind.options if s.required}


def cases() -> list[tuple[str, OptionSpec]]:
    return [(k.name, s) for k in PROVIDER_KINDS.values() for s in k.options if not s.prefix]


def build(kind: str, tmp_path: Path, **options: str) -> None:
    base = {k: str(tmp_path / v) if k == "path" else v for k, v in MINIMAL[kind].items()}
    BUILTIN_KINDS[kind](
        ProviderConfig("p", kind, {**base, **options}, MINIMAL_SECRETS.get(kind, {}))
    )


@pytest.mark.parametrize(("kind", "spec"), cases(), ids=lambda c: getattr(c, "name", c))
def test_every_declared_option_is_checked_as_declared(
    kind: str, spec: OptionSpec, tmp_path: Path
) -> None:
    if spec.secret:
        return  # secrets are text, checked by the provider (tested with each kind)
    if spec.required:
        with pytest.raises(ConfigError, match=rf"option '{spec.name}' is required\."):
            build(kind, tmp_path, **{spec.name: ""})
        return
    if spec.type == "text":
        return  # any text; the kinds' own tests check what their text options mean
    bad = "lots" if spec.type != "integer" else "1.5"
    with pytest.raises(ConfigError, match=rf"^provider 'p': option '{spec.name}' must be"):
        build(kind, tmp_path, **{spec.name: bad})
    if spec.type in ("number", "integer", "rate") and math.isfinite(spec.high):
        above = f"{spec.high + 1:.15g}" if spec.type != "integer" else str(int(spec.high) + 1)
        with pytest.raises(ConfigError, match=rf"option '{spec.name}' must be"):
            build(kind, tmp_path, **{spec.name: above})
    if spec.default is not None:  # the default itself is accepted
        build(kind, tmp_path, **{spec.name: spec.default_text})


def test_hints_say_type_default_and_help() -> None:
    timeout = next(s for s in PROVIDER_KINDS["webhook"].options if s.name == "timeout_s")
    assert timeout.hint() == "for the whole request (number above 0, at most 300; default 10)"
    url = next(s for s in PROVIDER_KINDS["webhook"].options if s.name == "url")
    assert url.hint().endswith(" (text; required)")
    security = next(s for s in PROVIDER_KINDS["smtp"].options if s.name == "security")
    assert security.type_text == "one of starttls, tls, none"
    with pytest.raises(ValueError, match="finite bounds"):
        OptionSpec("n", "integer")


def test_the_cli_lists_the_kinds_and_refuses_by_the_schema(cli: Cli) -> None:
    kinds = cli.json("provider", "kinds")
    assert [k["kind"] for k in kinds] == list(PROVIDER_KINDS)
    webhook = next(k for k in kinds if k["kind"] == "webhook")
    names = [o["name"] for o in webhook["options"]]
    assert names[:2] == ["url", "timeout_s"] and "circuit_failures" in names
    assert next(o for o in webhook["options"] if o["name"] == "signing_key")["type"] == "secret"
    text = cli.ok("provider", "kinds")
    url_hint = "the http(s) address to POST to; no user:password (text; required)"
    assert f"--option url=...  {url_hint}" in text
    assert "--secret password=..." in text

    bad = cli("provider", "add", "h", "--kind", "webhook", "--option", "url=https://x.test/",
              "--option", "timeout_s=900")  # fmt: skip
    assert bad.code == 2
    assert_one_sentence(bad.err)
    assert "option 'timeout_s' must be a number above 0 and at most 300" in bad.err


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_the_console_offers_each_kinds_options_with_their_hints(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path) as c:
        assert c.window is not None
        view = c.window.providers_view
        view.kind.setCurrentText("smtp")
        rows = {}
        for row in range(view.options.rowCount()):
            item = view.options.item(row, 0)
            assert item is not None
            rows[item.text()] = item.toolTip()
        declared = PROVIDER_KINDS["smtp"].own_options
        assert list(rows) == [s.name for s in declared if not s.secret]
        assert "circuit_failures: provider-level failures in a row" in view.options.toolTip()
        assert rows["host"] == "the SMTP server's host name or address (text; required)"
        items = [view.secrets.item(r, 0) for r in range(view.secrets.rowCount())]
        secrets = [item.text() for item in items if item is not None]
        assert secrets == ["username", "password"]
