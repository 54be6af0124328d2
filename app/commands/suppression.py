"""``omnipost suppression``: each tenant's suppression list, per provider: recipients a
provider said are gone for good (or an operator put there), to whom nothing is sent."""

from __future__ import annotations

import time
from collections.abc import Sequence

from app.as_json import suppression_json
from app.commands.base import open_engine
from app.commands.jsonlines import read_lines
from app.output import print_json, print_table
from app.session import Context
from engine import ConfigError

__all__ = ["suppression_add", "suppression_list", "suppression_remove"]


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


async def suppression_list(
    ctx: Context,
    tenant: str,
    *,
    provider: str | None = None,
    limit: int = 100,
    before: int | None = None,
    as_json: bool = False,
) -> int:
    """The tenant's suppressed recipients, masked, newest first, a page at a time."""
    async with open_engine(ctx) as engine:
        records = await engine.suppressions(tenant, provider=provider, limit=limit, before=before)
    if as_json:
        print_json([suppression_json(r) for r in records])
        return 0
    print_table(
        ["ID", "PROVIDER", "RECIPIENT", "SOURCE", "ADDED", "NOTIFICATION", "REASON"],
        [
            (
                r.id,
                r.provider,
                r.recipient_masked,
                r.source,
                _when(r.created_at),
                "-" if r.notification_id is None else r.notification_id,
                r.reason or "-",
            )
            for r in records
        ],
    )
    if len(records) == limit:
        print(f"more: --before {records[-1].id}")
    return 0


async def suppression_add(
    ctx: Context,
    tenant: str,
    provider: str,
    recipients: Sequence[str],
    *,
    path: str | None = None,
    reason: str = "",
) -> int:
    """Put the recipients given (and those of the file at ``path``, one a line; ``-``: stdin)
    on the tenant's list for ``provider``: all of them or, for a bad one, none; what the
    tenant had queued to them for ``provider`` is suppressed too."""
    given = list(recipients)
    if path is not None:
        given += [line.strip() for line in read_lines(path) if line.strip()]
    if not given:
        raise ConfigError("give a recipient, or --file with one recipient a line.")
    async with open_engine(ctx) as engine:
        added, queued = await engine.suppression_add_counts(tenant, provider, given, reason=reason)
    known = len(set(given)) - added
    also = f" ({known} already were)" if known else ""
    plural = "" if added == 1 else "s"
    print(f"suppressed {added} recipient{plural} of {tenant} for {provider}{also}")
    if queued:
        print(f"{queued} notification{'' if queued == 1 else 's'} queued to them will not be sent")
    return 0


async def suppression_remove(
    ctx: Context,
    tenant: str,
    provider: str | None,
    recipient: str | None,
    *,
    ids: Sequence[int] = (),
) -> int:
    """Take ``recipient`` off the tenant's list for ``provider`` (or the entries ``ids``, as
    listed): it is sent to again. Exit 1 when some of the ids were not the tenant's."""
    if ids and (provider or recipient):
        raise ConfigError("give PROVIDER RECIPIENT or --id, not both.")
    if not ids:
        if provider is None or recipient is None:
            raise ConfigError("give PROVIDER RECIPIENT, or --id with an entry's id.")
        async with open_engine(ctx) as engine:
            await engine.suppression_remove(tenant, provider, recipient)
        print(f"removed the recipient from {tenant}'s suppression list for {provider}")
        return 0
    wanted = len(set(ids))
    async with open_engine(ctx) as engine:
        removed = await engine.suppression_remove_ids(tenant, ids)
    print(f"removed {removed} of {wanted} entries from {tenant}'s suppression list")
    return 0 if removed == wanted else 1
