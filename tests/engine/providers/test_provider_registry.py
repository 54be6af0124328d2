"""What every built-in provider kind shares: the registry, validation, repr and closing."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import providers
from engine.core.errors import ConfigError
from engine.providers import (
    BUILTIN_KINDS,
    Provider,
    ProviderConfig,
    apns,
    fcm,
    file,
    simulated,
    smtp,
    twilio,
    webhook,
)
from testkit.apple import PEM as P8
from testkit.google import ACCOUNT

SECRETS = {
    "signing_key": "s3cr3t-signing",
    "username": "u53r",
    "password": "pa55w0rd",
    "auth_token": "tw1l10-t0k3n",
    "service_account": ACCOUNT,
    "signing_key_p8": P8,
}


def valid_config(kind: str, tmp_path: Path) -> ProviderConfig:
    options = {
        "simulated": {"latency_ms": "0"},
        "file": {"path": str(tmp_path / "out.jsonl")},
        "webhook": {"url": "https://hooks.example.com/in"},
        "smtp": {"host": "smtp.example.com", "from": "me@example.com"},
        "twilio": {"account_sid": "AC" + "0" * 32, "from": "+15550001111"},
        "fcm": {"project_id": "demo"},
        "apns": {"team_id": "TEAM123456", "key_id": "KEYID12345", "topic": "com.example.app"},
    }[kind]
    secrets = {
        "webhook": {"signing_key": SECRETS["signing_key"]},
        "smtp": {"username": SECRETS["username"], "password": SECRETS["password"]},
        "twilio": {"auth_token": SECRETS["auth_token"]},
        "fcm": {"service_account": SECRETS["service_account"]},
        "apns": {"signing_key": SECRETS["signing_key_p8"]},
    }.get(kind, {})
    return ProviderConfig(f"my-{kind}", kind, options, secrets)


def test_the_registry_names_the_kinds_by_their_module_kind() -> None:
    modules = (simulated, file, webhook, smtp, twilio, fcm, apns)
    assert list(BUILTIN_KINDS) == [module.KIND for module in modules]
    assert set(providers.__all__) >= {"BUILTIN_KINDS", "Provider", "ProviderConfig"}


@pytest.mark.parametrize("kind", sorted(BUILTIN_KINDS))
async def test_a_valid_config_builds_a_provider_that_hides_its_secrets(
    kind: str, tmp_path: Path
) -> None:
    built: Provider = BUILTIN_KINDS[kind](valid_config(kind, tmp_path))
    assert built.name == f"my-{kind}"
    shown = repr(built)
    assert shown.startswith(type(built).__name__ + "(name=")
    for secret in SECRETS.values():
        assert secret not in shown
    await built.aclose()
    await built.aclose()


@pytest.mark.parametrize("kind", sorted(BUILTIN_KINDS))
def test_an_unknown_option_is_refused_by_name(kind: str, tmp_path: Path) -> None:
    good = valid_config(kind, tmp_path)
    bad = ProviderConfig(good.name, kind, {**good.options, "colour": "blue"}, good.secrets)
    with pytest.raises(ConfigError) as caught:
        BUILTIN_KINDS[kind](bad)
    assert str(caught.value) == (
        f"provider 'my-{kind}': option 'colour' is not known to a {kind} provider."
    )
