"""Dispatch: the dispatcher's rounds over the pairs with due work (the book of pairs, claims of many
pairs), the senders, the completer that writes outcomes back, the work queue between them, the
directory of routes and limits, and each provider's circuit.
"""

__all__ = [
    "circuit",
    "claims",
    "completer",
    "directory",
    "dispatcher",
    "due",
    "ports",
    "senders",
    "settings",
    "work",
]
