"""The command line imports what a command uses when it runs (``bench/startup.py`` times it):
``--version`` and ``--help`` answer without the store, the engine or the providers, and a
command on SQLite loads neither Postgres' driver, nor Alembic, nor the HTTP and SMTP clients,
nor the planner. Checked by the modules a fresh interpreter holds after the command; and a
command run as the program leaves its modules frozen out of the garbage collector's sight
and the collector on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testkit.cli import REPO, clean_env

# After the command, print every module the interpreter loaded, one a line.
_SCRIPT = """
import sys
from app.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("exit", code)
print("\\n".join(sorted(sys.modules)))
"""

# What no command needs before it runs: the store and its drivers, the engine's parts, the
# providers' clients, the metrics server, Qt, the encryption library.
HEAVY = (
    "sqlalchemy",
    "alembic",
    "aiosqlite",
    "asyncpg",
    "httpx",
    "aiosmtplib",
    "cryptography",
    "prometheus_client",
    "redis",
    "PySide6",
    "fastapi",
    "uvicorn",
    "pydantic",
    "api",
    "engine.facade.engine",
    "engine.store",
    "engine.providers",
    "engine.planning.planner",
    "app.bindings",
    "app.commands.configure",
)
# What a command on SQLite that sends nothing and plans nothing does not need.
NOT_FOR_A_LISTING = (
    "alembic",
    "asyncpg",
    "sqlalchemy.dialects.postgresql",  # the partial indexes' declarations load it: apart
    "engine.store.partial_indexes",
    "httpx",
    "aiosmtplib",
    "prometheus_client",
    "redis",
    "PySide6",
    "fastapi",
    "uvicorn",
    "api",
    "engine.planning.planner",
    "engine.providers.webhook",  # a kind's module loads when a provider of that kind is built
    "engine.providers.smtp",
    "engine.providers.twilio",
    "engine.providers.fcm",
    "engine.providers.apns",
    "engine.providers.file",
    "app.commands.run",
    "app.commands.plan",
    "app.docs",
)


def loaded(args: list[str], home: Path) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *args],
        env=clean_env(home, OMNIPOST_DB=f"sqlite:///{home / 'omnipost.db'}"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    exit_line = next(line for line in lines if line.startswith("exit "))
    return exit_line, set(lines[lines.index(exit_line) + 1 :])


def found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(f"{n}.") for m in modules))


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], ["tenant", "--help"], ["worker", "--help"]]
)
def test_version_and_help_import_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    exit_line, modules = loaded(args, tmp_path)
    assert exit_line == "exit 0"
    assert found(modules, HEAVY) == []


@pytest.mark.slow
def test_a_listing_on_sqlite_loads_only_what_it_reads_with(tmp_path: Path) -> None:
    assert loaded(["migrate"], tmp_path)[0] == "exit 0"
    exit_line, modules = loaded(["tenant", "list"], tmp_path)
    assert exit_line == "exit 0"
    assert "sqlalchemy" in modules and "aiosqlite" in modules  # it did read the store
    assert found(modules, NOT_FOR_A_LISTING) == []


# The command as ``omnipost`` runs it (``main()`` reading the process's own arguments), then
# what it left of the garbage collector: the command's modules frozen, the collector on (a
# worker or the console runs for days after its start-up).
_PROGRAM = """
import gc
import sys
from app.cli import main
sys.argv = ["omnipost", *sys.argv[1:]]
code = main()
print("exit", code, "collecting", gc.isenabled(), "frozen", gc.get_freeze_count() > 10_000)
"""


@pytest.mark.slow
def test_a_command_run_as_the_program_freezes_its_modules_and_collects_again(
    tmp_path: Path,
) -> None:
    assert loaded(["migrate"], tmp_path)[0] == "exit 0"
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, "tenant", "list"],
        env=clean_env(tmp_path, OMNIPOST_DB=f"sqlite:///{tmp_path / 'omnipost.db'}"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "exit 0 collecting True frozen True", done.stderr


def test_the_check_sees_a_heavy_module() -> None:
    assert found({"sqlalchemy.orm", "json"}, HEAVY) == ["sqlalchemy"]
