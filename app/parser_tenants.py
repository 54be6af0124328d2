"""The command line's grammar of ``omnipost tenant``: add, set, list, import and export, and
the ``--rate``/``--burst``/``--unlimited`` flags every limit is set with (``app.parser`` puts
it together with the other commands)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["apikey_parsers", "limit_args", "suppression_parsers", "tenant_parsers"]


def limit_args(p: argparse.ArgumentParser) -> None:
    """The flags of a limit; ``app.cli`` makes them one (``engine.limit_of``)."""
    p.add_argument("--rate", help="N, N/s, N/min or N/h")
    p.add_argument("--burst", type=float, help="tokens that may be saved up (default: 1 s worth)")
    p.add_argument("--unlimited", action="store_true", help="remove the limit")


def tenant_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """``omnipost tenant ACTION`` on ``sub``, the subparsers of ``omnipost`` itself."""
    parent = sub.add_parser("tenant", help="tenants and their limits")
    # Its actions are parsers of its own class (app.parser's: a usage error is one sentence).
    tenant = parent.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parent))
    tenant.required = True
    for action in ("add", "set"):
        p = tenant.add_parser(action, parents=[common], help=f"{action} a tenant")
        p.add_argument("name")
        limit_args(p)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--disable", dest="enabled", action="store_false", default=None)
        group.add_argument("--enable", dest="enabled", action="store_true")
    p.add_argument(
        "--api-rate",
        metavar="RATE",
        help="HTTP API requests each of its keys may make (N/s, N/min); 'default': the server's",
    )
    p.add_argument(
        "--api-burst", type=float, help="requests a key may save up (default: 2 s worth)"
    )
    p.add_argument(
        "--max-queued",
        metavar="N",
        help="the most it may hold queued through the HTTP API; 'default': the server's",
    )
    p.add_argument(
        "--default-ttl",
        metavar="DURATION",
        help="the deadline of its notifications that name none, after their send time "
        "(5m, 2h); 'none': its provider's, if any",
    )
    p = tenant.add_parser("list", parents=[common], help="list tenants")
    p.add_argument("--json", action="store_true")
    p = tenant.add_parser(
        "import",
        parents=[common],
        help="add the tenants of a JSON-lines file, all of them or none",
        description=_IMPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="the JSON-lines file; - reads standard input")
    p.add_argument(
        "--update",
        action="store_true",
        help="give tenants that exist the line's limit and enabled flag (else they are refused)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = tenant.add_parser(
        "export", parents=[common], help="write every tenant as the JSON lines import reads"
    )
    p.add_argument("--output", metavar="FILE", help="write to FILE (default: standard output)")


_IMPORT_HELP = """\
Add the tenants of FILE, one JSON object a line:

  {"name": "acme", "rate": "300/min", "burst": 10, "enabled": true}

rate and burst read as `tenant add --rate --burst` reads them (no rate: unlimited; no burst:
one second's worth); enabled is true unless given; api_rate, api_burst and max_queued as
`tenant set --api-rate --api-burst --max-queued` (absent: the server's defaults); blank lines
are skipped. Every line is
checked first, and the file is written in one transaction: a bad line, or a tenant that
exists already (without --update), writes nothing. `omnipost tenant export` writes this form.
"""


def apikey_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """``omnipost apikey create|list|revoke``: a tenant's keys for the HTTP API."""
    parent = sub.add_parser("apikey", help="tenants' API keys (shown once, kept as a hash)")
    apikey = parent.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parent))
    apikey.required = True
    p = apikey.add_parser("create", parents=[common], help="make a key for a tenant")
    p.add_argument("tenant")
    p.add_argument("--name", default="", help="what the key is for (shown in listings)")
    p.add_argument(
        "--scope",
        default="send,read",
        help="send, read, webhooks, comma separated (default send,read)",
    )
    p.add_argument("--json", action="store_true")
    p = apikey.add_parser("list", parents=[common], help="list keys (never the keys themselves)")
    p.add_argument("tenant", nargs="?")
    p.add_argument("--json", action="store_true")
    p = apikey.add_parser("revoke", parents=[common], help="revoke a key for good")
    p.add_argument("id", type=int, metavar="ID")


def suppression_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """``omnipost suppression list|add|remove``: a tenant's suppressed recipients."""
    parent = sub.add_parser(
        "suppression", help="recipients nothing is sent to (gone, per the provider, or added)"
    )
    action = parent.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parent))
    action.required = True
    p = action.add_parser(
        "list", parents=[common], help="a tenant's suppressed recipients (masked), newest first"
    )
    p.add_argument("tenant")
    p.add_argument("--provider", help="only this provider's")
    p.add_argument(
        "--limit", type=int, default=100, help="how many to list (1 to 1000, default 100)"
    )
    p.add_argument("--before", type=int, metavar="ID", help="those older than this id (a page)")
    p.add_argument("--json", action="store_true")
    p = action.add_parser(
        "add", parents=[common], help="suppress recipients of a tenant for a provider"
    )
    p.add_argument("tenant")
    p.add_argument("provider")
    p.add_argument("recipients", nargs="*", metavar="RECIPIENT")
    p.add_argument(
        "--file", metavar="FILE", help="also the recipients of FILE, one a line (- : stdin)"
    )
    p.add_argument("--reason", default="", help="why (shown in listings)")
    p = action.add_parser(
        "remove",
        parents=[common],
        help="send to a suppressed recipient again: PROVIDER RECIPIENT, or --id as listed",
    )
    p.add_argument("tenant")
    p.add_argument("provider", nargs="?")
    p.add_argument("recipient", nargs="?")
    p.add_argument(
        "--id", type=int, action="append", dest="ids", metavar="ID", help="an entry's id (repeat)"
    )


def webhook_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """``omnipost webhook ...``: a tenant's endpoints for status events."""
    parent = sub.add_parser(
        "webhook", help="status events: what became of a tenant's notifications, posted to it"
    )
    action = parent.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parent))
    action.required = True
    p = action.add_parser(
        "add", parents=[common], help="subscribe a URL of the tenant's to its status events"
    )
    p.add_argument("tenant")
    p.add_argument("url")
    p.add_argument(
        "--events",
        action="append",
        metavar="TYPES",
        help="event types, comma separated (delivered,attempt_failed,dead,cancelled,"
        "suppressed,expired,scheduled; default all)",
    )
    p.add_argument(
        "--allow-private",
        action="store_true",
        help="let it reach private, loopback and link-local addresses, and plain http",
    )
    p.add_argument("--rate", type=float, help="its own pace, events a second (default 50)")
    p.add_argument("--burst", type=float, help="with --rate: events it may take at once")
    p.add_argument("--json", action="store_true")
    p = action.add_parser("list", parents=[common], help="a tenant's endpoints and their outbox")
    p.add_argument("tenant")
    p.add_argument("--json", action="store_true")
    for name, helptext in (
        ("remove", "remove an endpoint and its undelivered events"),
        ("enable", "enable an endpoint again (its held events are sent)"),
        ("disable", "stop sending to an endpoint (its events are held)"),
        ("test", "post a signed webhook.test event now and print the answer"),
    ):
        p = action.add_parser(name, parents=[common], help=helptext)
        p.add_argument("tenant")
        p.add_argument("id", type=int)
    p = action.add_parser(
        "rotate-secret", parents=[common], help="a new signing secret (shown once)"
    )
    p.add_argument("tenant")
    p.add_argument("id", type=int)
    p.add_argument(
        "--grace", default="24h", help="how long the old secret signs too (default 24h; 0: none)"
    )
    p.add_argument("--json", action="store_true")
    p = action.add_parser("replay", parents=[common], help="send a tenant's past events again")
    p.add_argument("tenant")
    p.add_argument("--since", required=True, help="an RFC 3339 time, or how long ago (2h, 1d)")
    p.add_argument("--id", type=int, dest="endpoint", help="only this endpoint's")
    p = action.add_parser("events", parents=[common], help="a tenant's newest events")
    p.add_argument("tenant")
    p.add_argument("--id", type=int, dest="endpoint", help="only this endpoint's")
    p.add_argument("--limit", type=int, default=50, help="how many (1 to 1000, default 50)")
    p.add_argument("--json", action="store_true")
