"""The dispatcher on virtual time: its rounds and looks, claims, backoff, batches, the envelope it
keeps, shares among workers, circuits, cancels and restarts.
"""
