"""The foundations every room stands on: the clock (real and virtual), the domain's types (limits,
bucket keys, messages, outcomes), errors, encryption of secrets at rest, masking for output, the
retry policy, circuit states and retention windows. Imports nothing else of the engine.
"""

__all__ = ["clock", "crypto", "domain", "errors", "health", "policy", "present", "retention"]
