"""The parts of ``Engine`` (``engine/engine.py``), one job each over the parts they share
(``parts``): configuration, notifications and dead letters, glances, provider health, keys,
plans and retention; and the tenant lines of import and export.
"""

__all__ = [
    "config",
    "glance",
    "health",
    "keys",
    "notifications",
    "parts",
    "plan",
    "retention",
    "tenant_lines",
]
