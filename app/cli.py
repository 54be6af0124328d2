"""``omnipost``: the command line. Exit 0 on success, 2 on bad input or usage (one sentence on
stderr), 1 on a runtime failure; never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from app import commands
from app.config import Paths, load_box, resolve_db_url
from app.output import RETENTION_WINDOWS
from engine import ConfigError, Conflict, NotFound, OmniPostError, Pattern, parse_age

__all__ = ["main"]

EXIT_FAILURE, EXIT_USAGE = 1, 2

Handler = Callable[[argparse.Namespace, commands.Context], Coroutine[Any, Any, int]]


_MESSAGE_MAX = 300


def _one_line(message: str) -> str:
    """``message`` as one printable line of at most about 300 characters: messages echo what
    was typed, which may hold newlines, control characters or 100 KB."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    if len(text) > _MESSAGE_MAX:
        half = _MESSAGE_MAX // 2
        text = f"{text[:half]}...{text[-half:]}"
    return text


def _version() -> str:
    try:
        return importlib.metadata.version("omnipost")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {_one_line(message)} (see `{self.prog} --help`).\n")
        raise SystemExit(EXIT_USAGE)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Python 3.11 reads "--rate=--" as the end of the options and hands the handler an
        # empty list instead of a string; refuse it as a missing value.
        if arg_strings == ["--"] and action.option_strings and action.nargs is None:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:40]!r}")
    return key, value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None


def _seconds(text: str, *, zero_ok: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:40]!r}") from None
    if not (0 <= value < 1e7 if zero_ok else 0 < value < 1e7):
        least = "0 or more" if zero_ok else "above 0"
        raise argparse.ArgumentTypeError(f"must be a number of seconds {least}, got {text[:40]!r}")
    return value


def _seconds_or_zero(text: str) -> float:
    return _seconds(text, zero_ok=True)


def _age(text: str) -> float | None:
    """An AGE such as ``12h`` or ``7d`` in seconds; ``0`` keeps forever (None)."""
    try:
        return parse_age(text)
    except ConfigError as exc:  # the parser adds "(see --help)." after the sentence
        raise argparse.ArgumentTypeError(exc.message.rstrip(".")) from None


def _redis_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        metavar="URL",
        default=os.environ.get("OMNIPOST_REDIS") or None,
        help="redis://... to share rate limits with other workers (default: $OMNIPOST_REDIS,"
        " else limits are kept in this process)",
    )


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
    parser.add_argument("--version", action="version", version=f"omnipost {_version()}")
    parser.add_argument("--db", dest="db_top", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)  # for the console
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = False  # no command: open the console
    parser.set_defaults(verbose=False, db=None, demo=False, redis=None, gui="console")

    p = sub.add_parser("migrate", parents=[common], help="create or upgrade the store's schema")
    p.set_defaults(handler=commands.migrate)

    _tenant_parsers(sub, common)
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
    p.set_defaults(handler=commands.limit_set)
    p = limit.add_parser("list", parents=[common], help="list pair limits")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.limit_list)

    _run_parsers(sub, common)
    _dead_parsers(sub, common)
    _retention_parsers(sub, common)
    _console_parsers(sub, common)
    return parser


def _console_parsers(sub: Any, common: _Parser) -> None:
    p = sub.add_parser("console", parents=[common], help="open the operator's console (default)")
    p.add_argument("--demo", action="store_true", help="set up demo data and start a burst")
    p.add_argument(
        "--no-dispatch",
        action="store_true",
        help="only watch: this console's own engine dispatches nothing until you press Start",
    )
    _redis_arg(p)
    p.set_defaults(gui="console")
    p = sub.add_parser(
        "self-test", parents=[common], help="run a short burst through the console, offscreen"
    )
    p.add_argument("--screenshot", metavar="PATH", help="save the main window as a PNG here")
    p.set_defaults(gui="selftest")


def _run_gui(module: str, args: argparse.Namespace, ctx: commands.Context) -> int:
    """Run ``app.<module>.main``; Qt is imported only here, so the CLI works without it."""
    if module == "console" and _no_screen():
        raise ConfigError(
            "the console needs a screen, and neither DISPLAY nor WAYLAND_DISPLAY is set; "
            "run `omnipost demo` for a burst in the terminal, or `omnipost self-test`."
        )
    try:
        gui = importlib.import_module(f"app.{module}")
    except ImportError as exc:
        raise OmniPostError(
            f"the console needs PySide6, qasync, pyqtgraph and numpy ({exc.name} is missing): "
            "pip install 'omnipost[console]'."
        ) from None
    result: int = gui.main(args, ctx)
    return result


def _no_screen() -> bool:
    """On Linux without X or Wayland (and no platform chosen), Qt would abort: say so first."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _run_parsers(sub: Any, common: _Parser) -> None:
    p = sub.add_parser("enqueue", parents=[common], help="queue notifications")
    p.add_argument("tenant", nargs="?")
    p.add_argument("provider", nargs="?")
    p.add_argument("recipient", nargs="?")
    p.add_argument("--payload", default="{}", help="a JSON object")
    p.add_argument("--key", help="idempotency key (unique per tenant)")
    p.add_argument("--priority", type=_int, default=0)
    p.add_argument(
        "--file", help="JSON lines of tenant, provider, recipient, payload, key; - is stdin"
    )
    p.set_defaults(handler=commands.enqueue)

    p = sub.add_parser("worker", parents=[common], help="dispatch queued notifications")
    p.add_argument("--concurrency", type=_positive_int, default=16)
    p.add_argument("--until-empty", action="store_true", help="exit when nothing is left to do")
    p.add_argument("--duration", type=_seconds, help="exit after this many seconds")
    p.add_argument("--lease-s", type=_seconds, default=30.0, help="lease length in seconds")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _redis_arg(p)
    p.set_defaults(handler=commands.worker)

    p = sub.add_parser("simulate", parents=[common], help="enqueue a burst and dispatch it live")
    p.add_argument("tenant", help="a tenant, or several separated by commas")
    p.add_argument("provider")
    p.add_argument("--count", type=_positive_int, required=True, help="notifications per tenant")
    p.add_argument("--pattern", choices=[x.value for x in Pattern], default="spike")
    p.add_argument(
        "--duration", type=_seconds_or_zero, default=0.0, help="seconds over which to enqueue"
    )
    p.add_argument("--concurrency", type=_positive_int, default=16)
    p.add_argument("--no-dispatch", action="store_true", help="only enqueue")
    _redis_arg(p)
    p.set_defaults(handler=commands.simulate)

    p = sub.add_parser("demo", parents=[common], help="set up demo tenants and run a live burst")
    p.add_argument("--count", type=_positive_int, default=300)
    p.set_defaults(handler=commands.demo)

    p = sub.add_parser("stats", parents=[common], help="queue depth, throughput, workers, limits")
    p.add_argument("--json", action="store_true")
    _redis_arg(p)
    p.set_defaults(handler=commands.stats)


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", help="N, N/s, N/min or N/h")
    p.add_argument("--burst", type=float, help="tokens that may be saved up (default: 1 s worth)")
    p.add_argument("--unlimited", action="store_true", help="remove the limit")


def _tenant_parsers(sub: Any, common: _Parser) -> None:
    tenant = sub.add_parser("tenant", help="tenants and their limits").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    tenant.required = True
    for action, handler in (("add", commands.tenant_add), ("set", commands.tenant_set)):
        p = tenant.add_parser(action, parents=[common], help=f"{action} a tenant")
        p.add_argument("name")
        _limit_args(p)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--disable", dest="enabled", action="store_false", default=None)
        group.add_argument("--enable", dest="enabled", action="store_true")
        p.set_defaults(handler=handler)
    p = tenant.add_parser("list", parents=[common], help="list tenants")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.tenant_list)


def _provider_parsers(sub: Any, common: _Parser) -> None:
    provider = sub.add_parser("provider", help="delivery providers").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    provider.required = True
    for action, handler in (("add", commands.provider_add), ("set", commands.provider_set)):
        p = provider.add_parser(action, parents=[common], help=f"{action} a provider")
        p.add_argument("name")
        p.add_argument("--kind", required=action == "add", help="simulated, file, webhook or smtp")
        _limit_args(p)
        p.add_argument(
            "--option", type=_key_value, action="append", default=[], metavar="KEY=VALUE"
        )
        p.add_argument(
            "--secret", type=_key_value, action="append", default=[], metavar="KEY=VALUE"
        )
        p.set_defaults(handler=handler)
    p = provider.add_parser("list", parents=[common], help="list providers (secrets masked)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.provider_list)
    p = provider.add_parser("test", parents=[common], help="send one test message now")
    p.add_argument("name")
    p.add_argument("recipient")
    p.set_defaults(handler=commands.provider_test)


def _dead_parsers(sub: Any, common: _Parser) -> None:
    dead = sub.add_parser("dead", help="dead notifications").add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser
    )
    dead.required = True
    p = dead.add_parser("list", parents=[common], help="list dead notifications")
    p.add_argument("--tenant")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.dead_list)
    for action, handler in (("retry", commands.dead_retry), ("discard", commands.dead_discard)):
        p = dead.add_parser(action, parents=[common], help=f"{action} dead notifications")
        p.add_argument("ids", nargs="*", type=_positive_int, metavar="ID")
        p.add_argument("--tenant")
        p.add_argument("--all", action="store_true", help="every dead one (of --tenant)")
        p.set_defaults(handler=handler)


def _retention_parsers(sub: Any, common: _Parser) -> None:
    retention = sub.add_parser(
        "retention", help="how long finished notifications and logs are kept"
    ).add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    retention.required = True
    p = retention.add_parser(
        "show", parents=[common], help="the retention windows and the store's size"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.retention_show)
    p = retention.add_parser(
        "set", parents=[common], help="change retention windows, for every process"
    )
    for name, field, keeps in RETENTION_WINDOWS:
        p.add_argument(
            f"--{name}",
            dest=field,
            type=_age,
            default=argparse.SUPPRESS,  # absent: unchanged (None means forever)
            metavar="AGE",
            help=f"how long to keep {keeps} (12h, 7d, 2w; 0 keeps forever)",
        )
    p.set_defaults(handler=commands.retention_set)
    p = sub.add_parser("prune", parents=[common], help="delete what retention keeps no longer")
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.prune)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        paths = Paths.from_env()
        ctx = commands.Context(
            paths=paths,
            db_url=resolve_db_url(args.db or args.db_top, paths),
            box=load_box(paths),
        )
        if args.command is None or args.command in ("console", "self-test"):
            return _run_gui(args.gui, args, ctx)
        handler: Handler = args.handler
        return asyncio.run(handler(args, ctx))
    except (ConfigError, NotFound, Conflict) as exc:
        print(f"omnipost: {_one_line(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    except OmniPostError as exc:
        print(f"omnipost: {_one_line(exc.message)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("omnipost: interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
