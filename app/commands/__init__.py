"""The CLI's commands, one module for each kind of work: ``configure`` (schema, tenants,
providers, limits), ``queue`` (enqueue, dead letters), ``run`` (worker, simulate, demo),
``plan`` (what-if planning in virtual time), ``stats``, ``retention`` and ``keys``.

Each command takes the run's ``Context`` and typed parameters (``app.bindings`` unpacks the
flags), prints what it did and returns an exit code. Bad input raises ConfigError and
friends, which ``app.cli`` turns into one sentence and exit 2.

Each module is imported when a command first uses it (``lazy_loader``, from the stub
``__init__.pyi``, which type checkers read): ``omnipost tenant list`` does not import the
planner, the worker's metrics or the providers' documentation.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
