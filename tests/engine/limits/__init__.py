"""Token buckets and limiters: the contract the local and the Redis limiter keep, their properties,
batches and the envelope.
"""
