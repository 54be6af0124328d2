"""The installed version, read only when asked (``importlib.metadata`` is slow to import): here
apart from the parser, so that ``omnipost --version`` answers without building it."""

from __future__ import annotations

__all__ = ["version"]


def version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("omnipost")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
