"""Encryption keys: a fresh one, and every stored secret re-encrypted under the newest, so that
an old key can be retired."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from app.output import print_json, print_table
from app.parser import one_line
from app.paths import Paths, add_key
from app.session import Context, actor
from app.wiring import build_engine, build_store
from engine import RotationProgress, RotationReport, SecretBox

__all__ = ["new_key", "rotate"]

_PROGRESS_EVERY_S = 1.0


def new_key(paths: Paths, *, add: bool = False) -> int:
    """Print a fresh key, and nothing else; with ``add``, put it first in the key file
    instead (the keys it held stay, so what they wrote stays readable)."""
    key = SecretBox.generate_key()
    if not add:
        print(key)
        return 0
    count = add_key(paths, key)
    print(
        f"added a new key first in {paths.key_file} ({count} keys, newest first); give every "
        "process that shares the store the same file, then run `omnipost keys rotate`."
    )
    return 0


async def rotate(ctx: Context, *, dry_run: bool = False, as_json: bool = False) -> int:
    """Re-encrypt (or, with ``dry_run``, count) every secret not under the newest key. Exit 1
    with one sentence when some row cannot be read with any configured key."""
    async with build_store(ctx.db_url, ctx.box) as store:
        # Not opened: opening builds the providers, whose secrets may be what no key reads,
        # and rotation needs none of what it loads.
        engine = build_engine(store, actor=actor("cli"))
        try:
            report = await engine.keys_rotate(dry_run=dry_run, progress=_progress())
        finally:
            await engine.close()
    if as_json:
        print_json(_as_json(report))
    else:
        _print(report, ctx.box)
    if report.problem is not None:
        print(f"omnipost: {one_line(report.problem)}", file=sys.stderr)
        return 1
    return 0


def _print(report: RotationReport, box: SecretBox) -> None:
    print(f"keys: {box.describe_keys()}, newest first")
    print_table(
        ["TABLE", "ROWS", "WOULD REWRITE" if report.dry_run else "REWRITTEN", "UNREADABLE"],
        [(t.table, t.checked, t.rewritten, t.unreadable) for t in report.tables],
    )
    if report.problem is not None:
        return
    if not report.dry_run:
        print(
            "every secret is now under the newest key; the older keys can go once every "
            "process that shares the store runs with the newest first."
        )
    elif report.rewritten:
        count = f"{report.rewritten} secret{'s' if report.rewritten != 1 else ''}"
        print(
            f"{count} under an older key or in the older (Fernet) format;"
            " `omnipost keys rotate` rewrites them."
        )
    else:
        print("every secret is under the newest key.")


def _as_json(report: RotationReport) -> dict[str, object]:
    return {
        "dry_run": report.dry_run,
        "keys": report.keys,
        "tables": {
            t.table: {"checked": t.checked, "rewritten": t.rewritten, "unreadable": t.unreadable}
            for t in report.tables
        },
        "checked": report.checked,
        "rewritten": report.rewritten,
        "unreadable": report.unreadable,
        "problem": report.problem,
    }


def _progress() -> Callable[[RotationProgress], None] | None:
    """A line on stderr at most every second while a terminal watches; nothing otherwise."""
    if not sys.stderr.isatty():
        return None
    last = [time.monotonic()]

    def show(step: RotationProgress) -> None:
        now = time.monotonic()
        if now - last[0] < _PROGRESS_EVERY_S:
            return
        last[0] = now
        done = "to rewrite" if step.phase == "check" else "rewritten"
        print(
            f"{step.phase}: {step.table} {step.checked} rows, {step.rewritten} {done}",
            file=sys.stderr,
            flush=True,
        )

    return show
