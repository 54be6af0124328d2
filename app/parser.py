"""The command line's grammar: every command and its flags, each value checked as it is
read. A usage error is one sentence on stderr and exit 2 (``app.cli`` runs the commands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from app.output import RETENTION_WINDOWS
from app.parser_tenants import (
    apikey_parsers,
    limit_args,
    suppression_parsers,
    tenant_parsers,
    webhook_parsers,
)
from app.parser_values import (
    age,
    key_value,
    metrics_args,
    non_negative_int,
    number,
    port,
    positive_int,
    redis_arg,
    seconds,
    seconds_or_zero,
    whole_number,
)
from app.version import version
from engine import Pattern

__all__ = ["EXIT_USAGE", "build_parser", "one_line"]

EXIT_USAGE = 2

_MESSAGE_MAX = 300


def one_line(message: str) -> str:
    """``message`` as one printable line of at most about 300 characters: messages echo what
    was typed, which may hold newlines, control characters or 100 KB."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    if len(text) > _MESSAGE_MAX:
        half = _MESSAGE_MAX // 2
        text = f"{text[:half]}...{text[-half:]}"
    return text


class _Version(argparse.Action):
    """``--version``: the version read when asked, not each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        print(f"omnipost {version()}")  # on stdout, as argparse's own version action
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {one_line(message)} (see `{self.prog} --help`).\n")
        raise SystemExit(EXIT_USAGE)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Python 3.11 reads "--rate=--" as the end of the options and hands the handler an
        # empty list instead of a string; refuse it as a missing value.
        if arg_strings == ["--"] and action.option_strings and action.nargs is None:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--db",
        metavar="URL",
        help="sqlite:///PATH or postgresql://... "
        "(default: $OMNIPOST_DB, else a SQLite file in the data directory)",
    )
    common.add_argument("-v", "--verbose", action="store_true", help="log more")
    parser = _Parser(
        prog="omnipost", description="Rate-limited multi-tenant notification dispatch."
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--db", dest="db_top", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)  # for the console
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = False  # no command: open the console
    parser.set_defaults(verbose=False, db=None, demo=False, redis=None, gui="console")

    sub.add_parser("migrate", parents=[common], help="create or upgrade the store's schema")

    tenant_parsers(sub, common)
    apikey_parsers(sub, common)
    suppression_parsers(sub, common)
    webhook_parsers(sub, common)
    _provider_parsers(sub, common)

    limit = sub.add_parser("limit", help="per (tenant, provider) limits").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    limit.required = True
    p = limit.add_parser(
        "set", parents=[common], help="set the limit of one tenant on one provider"
    )
    p.add_argument("tenant")
    p.add_argument("provider")
    p.add_argument("--rate", help="N, N/s, N/min or N/h")
    p.add_argument("--burst", type=float)
    p.add_argument("--clear", action="store_true", help="remove the limit")
    p = limit.add_parser("list", parents=[common], help="list pair limits")
    p.add_argument("--json", action="store_true")

    _run_parsers(sub, common)
    _cancel_parser(sub, common)
    _plan_parser(sub, common)
    _dead_parsers(sub, common)
    _retention_parsers(sub, common)
    _keys_parsers(sub, common)
    _console_parsers(sub, common)
    return parser


_KEYS_HELP = """\
Recipients and provider secrets are stored encrypted. The keys come from OMNIPOST_KEYS (comma
separated, newest first) or, when it is not set, from the key file omnipost.keys in the data
directory (one key a line, newest first). The newest key encrypts; every key decrypts.

To retire a key:
  1. omnipost keys new            print a fresh key (--add puts it first in the key file)
  2. give every process that shares the store the new key first (OMNIPOST_KEYS=NEW,OLD, or
     the key file with NEW on its first line) and restart them
  3. omnipost keys rotate         re-encrypt every stored secret under the new key
  4. OMNIPOST_KEYS=NEW omnipost keys rotate --dry-run
                                  check that the new key alone reads everything
  5. remove the old key everywhere
"""


def _keys_parsers(sub: Any, common: _Parser) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    keys = sub.add_parser(
        "keys",
        help="encryption keys: a new one, rotation",
        description=_KEYS_HELP,
        formatter_class=raw,
    ).add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    keys.required = True
    p = keys.add_parser(
        "new",
        help="print a fresh encryption key",
        description=f"Print a fresh encryption key, and nothing else.\n\n{_KEYS_HELP}",
        formatter_class=raw,
    )
    p.add_argument(
        "--add",
        action="store_true",
        help="put it first in the key file of the data directory instead of printing it"
        " (not with OMNIPOST_KEYS)",
    )
    p = keys.add_parser(
        "rotate",
        parents=[common],
        help="re-encrypt every stored secret under the newest key",
        description="Re-encrypt every recipient and provider secret that is not under the newest\n"
        "key, in batches; safe while workers run, and to interrupt and run again. When some\n"
        "row cannot be read with any key, it names the row, writes nothing and exits 1.\n\n"
        f"{_KEYS_HELP}",
        formatter_class=raw,
    )
    p.add_argument(
        "--dry-run", action="store_true", help="count what would be rewritten; write nothing"
    )
    p.add_argument("--json", action="store_true")


def _console_parsers(sub: Any, common: _Parser) -> None:
    p = sub.add_parser("console", parents=[common], help="open the operator's console (default)")
    p.add_argument("--demo", action="store_true", help="set up demo data and start a burst")
    p.add_argument(
        "--no-dispatch",
        action="store_true",
        help="only watch: this console's own engine dispatches nothing until you press Start",
    )
    redis_arg(p)
    metrics_args(p)
    p.add_argument(
        "--serve", metavar="PORT", type=port, help="also serve the HTTP API on 127.0.0.1:PORT"
    )
    p.set_defaults(gui="console")
    p = sub.add_parser(
        "self-test", parents=[common], help="run a short burst through the console, offscreen"
    )
    p.add_argument("--screenshot", metavar="PATH", help="save the main window as a PNG here")
    p.set_defaults(gui="selftest")


def _run_parsers(sub: Any, common: _Parser) -> None:
    p = sub.add_parser("enqueue", parents=[common], help="queue notifications")
    p.add_argument("tenant", nargs="?")
    p.add_argument("provider", nargs="?")
    p.add_argument("recipient", nargs="?")
    p.add_argument("--payload", default="{}", help="a JSON object")
    p.add_argument("--key", help="idempotency key (unique per tenant)")
    p.add_argument("--priority", type=whole_number, default=0)
    p.add_argument(
        "--file",
        help="JSON lines of tenant, provider, recipient, payload, key, priority, send_at, "
        "expires_at, ttl_s; - is stdin",
    )
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--at", metavar="TIME", help="not before TIME (RFC 3339 with an offset): scheduled"
    )
    when.add_argument(
        "--in", dest="in_", metavar="DURATION", help="not before this long from now (10m, 2h)"
    )
    until = p.add_mutually_exclusive_group()
    until.add_argument(
        "--expires-at", metavar="TIME", help="never sent after TIME (RFC 3339 with an offset)"
    )
    until.add_argument(
        "--ttl", metavar="DURATION", help="never sent later than this after its send time (5m)"
    )

    p = sub.add_parser("worker", parents=[common], help="dispatch queued notifications")
    p.add_argument("--concurrency", type=positive_int, default=16)
    p.add_argument("--until-empty", action="store_true", help="exit when nothing is left to do")
    p.add_argument("--duration", type=seconds, help="exit after this many seconds")
    p.add_argument("--lease-s", type=seconds, default=30.0, help="lease length in seconds")
    p.add_argument(
        "--prefetch",
        type=non_negative_int,
        default=None,
        help="leases taken ahead of the free senders for keys no limit paces"
        " (default: one batch, 32; 0: none)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument(
        "--disable-webhooks-after",
        metavar="DURATION",
        help="disable a status-event endpoint whose every delivery failed this long (default 5d)",
    )
    redis_arg(p)
    metrics_args(p)
    p.add_argument(
        "--serve", metavar="PORT", type=port, help="also serve the HTTP API on 127.0.0.1:PORT"
    )
    _serve_parser(sub, common)

    p = sub.add_parser("simulate", parents=[common], help="enqueue a burst and dispatch it live")
    p.add_argument("tenant", help="a tenant, or several separated by commas")
    p.add_argument("provider")
    p.add_argument("--count", type=positive_int, required=True, help="notifications per tenant")
    p.add_argument("--pattern", choices=[x.value for x in Pattern], default="spike")
    p.add_argument(
        "--duration", type=seconds_or_zero, default=0.0, help="seconds over which to enqueue"
    )
    p.add_argument("--concurrency", type=positive_int, default=16)
    p.add_argument("--no-dispatch", action="store_true", help="only enqueue")
    redis_arg(p)

    p = sub.add_parser("demo", parents=[common], help="set up demo tenants and run a live burst")
    p.add_argument("--count", type=positive_int, default=300)

    p = sub.add_parser("stats", parents=[common], help="queue depth, throughput, workers, limits")
    p.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="every tenant (default: the 20 with the most queued, when there are more)",
    )
    p.add_argument(
        "--tenant", action="append", default=[], metavar="NAME", help="only this tenant (repeat)"
    )
    p.add_argument("--json", action="store_true")
    redis_arg(p)


_PLAN_HELP = """\
Play traffic in virtual time through the real dispatcher against the limits in force and,
with --set or --concurrency, proposed ones. Nothing is sent or written. One traffic:
  omnipost plan TENANT[,TENANT...] PROVIDER --count N   a burst, as `simulate` enqueues it
  omnipost plan --backlog                               what is queued now
  omnipost plan --replay HOURS [--speed K]              the enqueues of the last HOURS
"""


def _plan_parser(sub: Any, common: _Parser) -> None:
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="what if: a burst, the backlog or recent traffic against current and proposed "
        "limits, in virtual time",
        description=_PLAN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("tenant", nargs="?", help="a tenant, or several separated by commas")
    p.add_argument("provider", nargs="?")
    p.add_argument("--count", type=positive_int, help="notifications per tenant in a burst")
    p.add_argument("--pattern", choices=[x.value for x in Pattern], help="default: spike")
    p.add_argument("--duration", type=seconds_or_zero, help="seconds a burst arrives over")
    p.add_argument(
        "--ttl", metavar="DURATION", help="each of a burst's never sent later than this (60s)"
    )
    p.add_argument("--backlog", action="store_true", help="plan what is queued now")
    p.add_argument("--replay", type=number, metavar="HOURS", help="the last HOURS' enqueues")
    p.add_argument("--speed", type=number, metavar="K", help="replay K times faster")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CHANGE",
        help="a proposed limit: tenant:NAME=RATE[:BURST], provider:NAME=..., "
        "pair:TENANT/PROVIDER=...; RATE none removes it",
    )
    p.add_argument("--concurrency", type=positive_int, help="a proposed total concurrency")
    p.add_argument("--json", action="store_true")


def _provider_parsers(sub: Any, common: _Parser) -> None:
    provider = sub.add_parser("provider", help="delivery providers").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    provider.required = True
    for action in ("add", "set"):
        p = provider.add_parser(action, parents=[common], help=f"{action} a provider")
        p.add_argument("name")
        p.add_argument(
            "--kind",
            required=action == "add",
            help="simulated, file, webhook, smtp or your own; `omnipost provider kinds` lists"
            " them with their options",
        )
        limit_args(p)
        p.add_argument("--option", type=key_value, action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--secret", type=key_value, action="append", default=[], metavar="KEY=VALUE")
    p = provider.add_parser("list", parents=[common], help="list providers (secrets masked)")
    p.add_argument("--json", action="store_true")
    p = provider.add_parser("kinds", parents=[common], help="the kinds and the options each takes")
    p.add_argument("--json", action="store_true")
    p = provider.add_parser("test", parents=[common], help="send one test message now")
    p.add_argument("name")
    p.add_argument("recipient")
    p = provider.add_parser(
        "resume",
        parents=[common],
        help="close a provider's open circuit now: its notifications go out again at once",
    )
    p.add_argument("name")


def _cancel_parser(sub: Any, common: _Parser) -> None:
    p = sub.add_parser(
        "cancel",
        parents=[common],
        help="cancel queued notifications of a tenant",
        description="Cancel queued notifications of TENANT: they are never sent. Exit 1 when "
        "some ID was not found for TENANT or was not queued (leased, delivered, dead or "
        "cancelled already); the others are cancelled still.",
    )
    p.add_argument("tenant", metavar="TENANT")
    p.add_argument("ids", nargs="+", type=positive_int, metavar="ID")
    p.add_argument("--json", action="store_true", help="an object per ID")


def _dead_parsers(sub: Any, common: _Parser) -> None:
    dead = sub.add_parser("dead", help="dead notifications").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    dead.required = True
    p = dead.add_parser("list", parents=[common], help="list dead notifications")
    p.add_argument("--tenant")
    p.add_argument("--json", action="store_true")
    for action in ("retry", "discard"):
        p = dead.add_parser(action, parents=[common], help=f"{action} dead notifications")
        p.add_argument("ids", nargs="*", type=positive_int, metavar="ID")
        p.add_argument("--tenant")
        p.add_argument("--all", action="store_true", help="every dead one (of --tenant)")


def _retention_parsers(sub: Any, common: _Parser) -> None:
    retention = sub.add_parser(
        "retention", help="how long finished notifications and logs are kept"
    ).add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    retention.required = True
    p = retention.add_parser(
        "show", parents=[common], help="the retention windows and the store's size"
    )
    p.add_argument("--json", action="store_true")
    p = retention.add_parser(
        "set", parents=[common], help="change retention windows, for every process"
    )
    for name, field, keeps in RETENTION_WINDOWS:
        p.add_argument(
            f"--{name}",
            dest=field,
            type=age,
            default=argparse.SUPPRESS,  # absent: unchanged (None means forever)
            metavar="AGE",
            help=f"how long to keep {keeps} (12h, 7d, 2w; 0 keeps forever)",
        )
    p = sub.add_parser("prune", parents=[common], help="delete what retention keeps no longer")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument("--json", action="store_true")


def _serve_parser(sub: Any, common: _Parser) -> None:
    p = sub.add_parser(
        "serve", parents=[common], help="serve the HTTP API (tenants call it with their API keys)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--workers", type=positive_int, default=1, help="server processes (default 1)")
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate")
    p.add_argument("--tls-key", metavar="FILE", help="... and this PEM private key")
    p.add_argument(
        "--api-rate",
        metavar="RATE",
        help="requests per key where the tenant sets none (default 100/s, burst 2 s worth)",
    )
    p.add_argument(
        "--max-queued",
        type=positive_int,
        help="the queue cap where the tenant sets none (default 1,000,000)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request (not the keys)")
    redis_arg(p)
