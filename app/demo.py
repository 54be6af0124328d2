"""The demo setup: a handful of tenants and simulated providers with different rates and
failure behaviour, so a new user sees live motion within seconds. Shared by ``omnipost demo``
and the console (``--demo``, or offered on an empty store)."""

from __future__ import annotations

from engine import Engine, Limit

__all__ = ["DEMO_PROVIDERS", "DEMO_TENANTS", "seed_demo"]

DEMO_TENANTS: tuple[tuple[str, Limit | None], ...] = (
    ("acme", Limit(50, 20)),
    ("globex", Limit(20, 10)),
    ("initech", None),
    ("umbrella", Limit(8, 4)),
    ("hooli", Limit(120, 60)),
)

DEMO_PROVIDERS: tuple[tuple[str, Limit | None, dict[str, str]], ...] = (
    (
        "sms-sim",
        Limit(60, 30),
        {
            "latency_ms": "20",
            "latency_jitter_ms": "10",
            "error_rate": "0.02",
            "throttle_rate": "0.01",
            "retry_after_s": "0.5",
        },
    ),
    (
        "email-sim",
        Limit(30, 15),
        {
            "latency_ms": "80",
            "latency_jitter_ms": "40",
            "error_rate": "0.05",
            "permanent_rate": "0.01",
        },
    ),
    (
        "push-sim",
        Limit(200, 100),
        {
            "latency_ms": "5",
            "latency_jitter_ms": "3",
            "throttle_rate": "0.03",
            "retry_after_s": "1",
        },
    ),
)

DEMO_PAIRS = (("acme", "email-sim", Limit(10, 5)),)


async def seed_demo(engine: Engine) -> list[str]:
    """Add whichever demo tenants, providers and pair limits are missing; existing ones are
    left as they are. Returns the names added."""
    added = []
    tenants = {t.name for t in await engine.tenants()}
    for name, limit in DEMO_TENANTS:
        if name not in tenants:
            await engine.tenant_add(name, limit)
            added.append(name)
    providers = {p.name for p in await engine.providers()}
    for name, limit, options in DEMO_PROVIDERS:
        if name not in providers:
            await engine.provider_add(name, "simulated", limit, options)
            added.append(name)
    pairs = {(p.tenant, p.provider) for p in await engine.pair_limits()}
    for tenant, provider, limit in DEMO_PAIRS:
        if (tenant, provider) not in pairs:
            await engine.pair_limit_set(tenant, provider, limit)
    return added
