"""The CLI's commands, one module for each kind of work: ``configure`` (schema, tenants,
providers, limits), ``queue`` (enqueue, dead letters), ``run`` (worker, simulate, demo),
``plan`` (what-if planning in virtual time), ``stats``, ``retention`` and ``keys``.

Each command takes the run's ``Context`` and typed parameters (``app.cli`` unpacks the flags),
prints what it did and returns an exit code. Bad input raises ConfigError and friends, which
``app.cli`` turns into one sentence and exit 2.
"""

from app.commands.base import open_engine
from app.session import Context

__all__ = ["Context", "open_engine"]
