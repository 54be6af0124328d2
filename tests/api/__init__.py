"""The HTTP API: its routes, keys and limits, requests coalesced, idempotency, and the server."""
