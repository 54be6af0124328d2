"""``omnipost``: the command line. Exit 0 on success, 2 on bad input or usage (one sentence on
stderr), 1 on a runtime failure; never a traceback.

This module parses the flags and turns errors into sentences; what a command runs is
``app.bindings``, imported once the flags are parsed: ``omnipost --version`` and ``--help``
answer without the store, the engine or the providers.

A command's modules make some 100,000 objects (SQLAlchemy half of them) that stay until the
process exits, and the garbage collector would walk them again and again for nothing: a few
times while they load, and in collection after collection at exit. So ``omnipost``
loads them with the collector off, freezes what they made out of its sight (``gc.freeze``),
and freezes the heap at exit after one last collection: 0.13 s of ``tenant list``'s 0.5 s.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["build_parser", "main"]

EXIT_FAILURE = 1


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (``app.parser``, imported when first asked for)."""
    from app.parser import build_parser as build

    return build()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (None: the process's own arguments, as ``omnipost``
    and ``python -m app`` run it); its exit code."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        from app.version import version  # no parser, no engine: answered at once

        print(f"omnipost {version()}")
        return 0
    # The parser names the engine's values (patterns, errors): imported once past --version.
    from app.parser import EXIT_USAGE, one_line
    from engine import ConfigError, Conflict, NotFound, OmniPostError

    atexit.unregister(_freeze_at_exit)  # registered once, however often main runs
    atexit.register(_freeze_at_exit)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        with _loading(own_process=argv is None):
            from app.bindings import prepare_command  # the commands' imports, once one runs

            command = prepare_command(args)
        return command()
    except (ConfigError, NotFound, Conflict) as exc:
        print(f"omnipost: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    except OmniPostError as exc:
        print(f"omnipost: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("omnipost: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `omnipost stats | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE


@contextlib.contextmanager
def _loading(*, own_process: bool) -> Iterator[None]:
    """Around the imports of a command that has the process to itself (``own_process``):
    no garbage collection while they load, then what they made is frozen out of the
    collector's sight, for the command's run and its exit. A caller that runs ``main`` in its
    own process (the tests) keeps its collector as it was, and nothing of its is frozen."""
    if not own_process or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _freeze_at_exit() -> None:
    """Spare the interpreter's shutdown its garbage collections over every object the
    command's imports made (SQLAlchemy's alone make it 0.05 s of a store command's 0.45 s):
    what is garbage now is collected and finalized as the shutdown would have; what is still
    referenced is frozen, out of the collector's sight, and left to the operating system, as
    Python never promises to finalize objects that still exist at exit."""
    gc.collect()
    gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
