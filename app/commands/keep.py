"""``KEEP``: a command's "no limit asked for" (leave the configured one as it is), apart from
the commands so that the command line's flags are read without importing them."""

from __future__ import annotations

import enum

from engine import Limit

__all__ = ["KEEP", "Keep", "LimitChange"]


class Keep(enum.Enum):
    """No limit was asked for: leave the one configured as it is."""

    LIMIT = "keep"


KEEP = Keep.LIMIT
LimitChange = Limit | None | Keep  # a new limit, None to remove it, or KEEP
