"""The façade: ``Engine`` (``engine.py``, its docstring the menu of everything it offers) and
its parts, one job each over what they share (``parts.py``): configuration, overview,
notifications, the requests of HTTP callers, API keys, suppressions, circuits, retention, the
rotation of the encryption keys and plans; and the lines of a tenant import (``tenant_lines``).

Everything outside the engine reaches these through ``engine``'s public names.
"""
