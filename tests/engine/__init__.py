"""The engine's own tests: its core (domain checks, clock, policy), its façade (an engine's smoke
run, tenants kept apart, suppressions, API keys, a batch enqueue) and its telemetry and
snapshots; the rooms below it have theirs.
"""
