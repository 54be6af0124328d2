"""``ConfigRepo.tenant_page`` on SQLite and on Postgres: one page of the tenants, filtered by
name and sorted in the database, and how many match (what the console's table of 100,000
tenants reads instead of every row)."""

from __future__ import annotations

import pytest

from engine.core.domain import Limit
from engine.core.errors import ConfigError
from engine.store import Store, TenantQuery, TenantSpec

T0 = 1_700_000_000.0


async def _tenants(store: Store) -> None:
    specs = [
        TenantSpec("acme", Limit(10, 20), line=1),
        TenantSpec("Acme-EU", Limit(5, 5), line=2),
        TenantSpec("beta", None, line=3),  # unlimited
        TenantSpec("gamma", Limit(50, 1), enabled=False, line=4),
        TenantSpec("delta_1", Limit(5, 50), line=5),
        TenantSpec("delta11", Limit(1, 1), line=6),
    ]
    await store.config.tenant_import(specs, update=False, now=T0, actor="test")


def names(page: object) -> list[str]:
    return [t.name for t in getattr(page, "tenants")]  # noqa: B009 - any page


async def test_pages_by_name_count_every_match(store: Store) -> None:
    await _tenants(store)
    cfg = store.config

    first = await cfg.tenant_page(TenantQuery(limit=2))
    second = await cfg.tenant_page(TenantQuery(offset=2, limit=2))
    past = await cfg.tenant_page(TenantQuery(offset=10, limit=2))

    every = [t.name for t in await cfg.tenants()]
    assert names(first) + names(second) == every[:4]
    assert first.total == second.total == past.total == 6
    assert names(past) == []
    assert first.query == TenantQuery(limit=2)


async def test_the_filter_ignores_case_and_takes_like_characters_literally(store: Store) -> None:
    await _tenants(store)
    cfg = store.config

    acme = await cfg.tenant_page(TenantQuery(match="ACME"))
    underscore = await cfg.tenant_page(TenantQuery(match="a_1"))  # not "any one character"
    none = await cfg.tenant_page(TenantQuery(match="%"))

    assert sorted(names(acme), key=str.casefold) == ["acme", "Acme-EU"]
    assert acme.total == 2
    assert names(underscore) == ["delta_1"]
    assert (names(none), none.total) == ([], 0)


async def test_sorts_put_unlimited_above_every_number_and_ties_by_name(store: Store) -> None:
    await _tenants(store)
    cfg = store.config

    by_rate = await cfg.tenant_page(TenantQuery(sort="rate"))
    by_rate_down = await cfg.tenant_page(TenantQuery(sort="rate", descending=True))
    by_burst = await cfg.tenant_page(TenantQuery(sort="burst", limit=3))
    disabled_first = await cfg.tenant_page(TenantQuery(sort="enabled", limit=1))

    assert names(by_rate) == ["delta11", "Acme-EU", "delta_1", "acme", "gamma", "beta"]
    assert names(by_rate_down)[:2] == ["beta", "gamma"]
    assert names(by_burst) == ["delta11", "gamma", "Acme-EU"]
    assert names(disabled_first) == ["gamma"]


async def test_an_unknown_sort_is_one_sentence(store: Store) -> None:
    with pytest.raises(ConfigError, match="tenants sort by one of name, rate, burst, enabled"):
        await store.config.tenant_page(TenantQuery(sort="tokens"))
