"""Rate limits: the token bucket, the ``Limiter`` seam every limiter meets, the local limiter, the
Redis limiter (its Lua scripts, batches and the local fallback while Redis is away) and the
envelope a run is checked against. Depends on ``core`` only: never on dispatch or planning.
"""

__all__ = [
    "bucket",
    "envelope",
    "limiter",
    "local_limiter",
    "redis_batch",
    "redis_calls",
    "redis_fallback",
    "redis_limiter",
]
