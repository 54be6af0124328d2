"""The retention tests' clock and actor, and a store's encryption keys for them."""

from __future__ import annotations

from dataclasses import dataclass

from engine import (
    Store,
)

T0 = 1_700_000_000.0


MINUTE, HOUR, DAY, WEEK = 60.0, 3_600.0, 86_400.0, 604_800.0


ACTOR = "test"


@dataclass(frozen=True)
class Keys:
    """Two tenants and two providers, so that rows fall under four (tenant, provider) keys."""

    tenants: tuple[int, int]
    providers: tuple[int, int]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return [(t, p) for t in self.tenants for p in self.providers]


async def make_keys(store: Store) -> Keys:
    config = store.config
    tenants = [(await config.tenant_add(n, None, now=T0, actor=ACTOR)).id for n in ("acme", "beta")]
    providers = [
        (await config.provider_add(n, "simulated", None, {}, {}, now=T0, actor=ACTOR)).id
        for n in ("sms", "mail")
    ]
    return Keys((tenants[0], tenants[1]), (providers[0], providers[1]))
