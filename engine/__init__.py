"""OmniPost's engine: rate-limited, leased, at-least-once notification dispatch. No Qt here.

The console and the CLI drive it through these names::

    async with Engine(Store(url, box), LocalLimiter(SystemClock()), BUILTIN_KINDS) as engine:
        await engine.start()
        await engine.enqueue("acme", "sms", "+15551234567", {"text": "hi"})
        snapshot = await engine.snapshot()
        await engine.stop()

Every name is loaded when it is first used (``lazy_loader``), from the module that
``__init__.pyi`` names for it; that stub is also what type checkers read. So
``from engine import ConfigError`` imports the errors and nothing else, and a command that
needs no store starts without SQLAlchemy, Alembic, httpx, cryptography or the planner.
``RedisLimiter`` needs the ``redis`` extra, which a console-only install may not have: the
ImportError of its first use says so.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
