"""Size of the packaged app and its cold start to the first window, beside ``python -m app``.
Prints JSON.

    make dist && .venv/bin/python bench/coldstart.py [--runs 5]

- bundle: bytes and files under ``dist/omnipost/`` (``du -sb``).
- first window: from spawning ``omnipost console`` (a new home and a new SQLite store, so it
  migrates first, as a first start does) until its main window is mapped on an X server. No
  hook in the app: an Xvfb display of its own, and xdotool polling every 20 ms for a visible
  window titled "OmniPost console". Needs ``apt-get install xvfb xdotool libxcb-icccm4
  libxcb-keysyms1`` (the last two are what Qt's xcb plugin needs beyond a minimal system);
  without them this figure is null and says why.
- ``--help``: start to exit of the interpreter and the CLI's imports, no Qt.

Every run is a new process, after one unmeasured run of each, so the page cache is warm: the
start an operator sees the second time. ``--drop-caches`` (root) empties the page cache before
every run instead: the first start after a reboot, read from disk. Medians of ``--runs``; the
load average is in the output, since the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "dist" / "omnipost"
TITLE = "OmniPost console"
POLL_S = 0.02
WINDOW_TIMEOUT_S = 60.0


def bundle_size(folder: Path) -> dict[str, float]:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    size = sum(p.stat().st_size for p in files)
    return {"bytes": size, "mib": round(size / 2**20, 1), "files": len(files)}


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(seconds), 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
    }


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """No OMNIPOST_* from outside; a data and a settings folder of its own under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMNIPOST_", "PYTHON"))}
    own = {"OMNIPOST_HOME": str(home / "home"), "XDG_CONFIG_HOME": str(home / "config")}
    return env | own | extra


@contextmanager
def x_display() -> Iterator[str]:
    """A private Xvfb server; yields its DISPLAY."""
    read_fd, write_fd = os.pipe()
    # -noreset: by default the server resets whenever its last client (each xdotool) leaves,
    # and a console connecting during a reset fails to start.
    options = ["-screen", "0", "1600x1000x24", "-noreset", "-nolisten", "tcp"]
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), *options],
        pass_fds=(write_fd,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as pipe:
            number = pipe.readline().strip()
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(10)


def window_shown(display: str) -> bool:
    found = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", f"^{TITLE}$"],
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        check=False,
    )
    return found.returncode == 0 and bool(found.stdout.strip())


def first_window_s(command: list[str], display: str) -> float:
    """Seconds from spawning the console until its window is visible on ``display``."""
    with tempfile.TemporaryDirectory(prefix="omnipost-coldstart-") as folder:
        env = clean_env(Path(folder), DISPLAY=display, QT_QPA_PLATFORM="xcb")
        db = f"sqlite:///{folder}/console.db"
        start = time.perf_counter()
        proc = subprocess.Popen(
            [*command, "console", "--db", db],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            while not window_shown(display):
                if proc.poll() is not None:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"the console exited with {proc.returncode}: {err}")
                if time.perf_counter() - start > WINDOW_TIMEOUT_S:
                    raise RuntimeError(f"no window within {WINDOW_TIMEOUT_S:g} s")
                time.sleep(POLL_S)
            return time.perf_counter() - start
        finally:
            proc.terminate()
            proc.wait(30)


def run_s(command: list[str], args: list[str]) -> float:
    """Seconds for ``command args`` to run to completion; it must exit 0."""
    with tempfile.TemporaryDirectory(prefix="omnipost-coldstart-") as folder:
        env = clean_env(Path(folder))
        start = time.perf_counter()
        done = subprocess.run(
            [*command, *args], env=env, cwd=REPO, capture_output=True, text=True, check=False
        )
        elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited with {done.returncode}: {done.stdout}")
    return elapsed


def measure(measure_once: Callable[[], float], runs: int, cold: bool) -> dict[str, float]:
    """``runs`` runs after one unmeasured one; ``cold``: each after emptying the page cache."""
    measure_once()
    seconds = []
    for _ in range(runs):
        if cold:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
        seconds.append(measure_once())
    return summary(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each")
    parser.add_argument(
        "--drop-caches",
        action="store_true",
        help="empty the page cache before every run (root, Linux): a first start after boot",
    )
    args = parser.parse_args()
    commands = {"python -m app": [sys.executable, "-m", "app"]}
    if (BUNDLE / "omnipost").is_file():
        commands = {"frozen": [str(BUNDLE / "omnipost")], **commands}
    display_missing = [tool for tool in ("Xvfb", "xdotool") if shutil.which(tool) is None]

    results: dict[str, object] = {}
    for name, command in commands.items():
        row: dict[str, object] = {
            "help": measure(partial(run_s, command, ["--help"]), args.runs, args.drop_caches),
            "first_window": None,
        }
        if not display_missing:
            with x_display() as display:
                row["first_window"] = measure(
                    partial(first_window_s, command, display), args.runs, args.drop_caches
                )
        results[name] = row

    print(
        json.dumps(
            {
                "bundle": bundle_size(BUNDLE) if BUNDLE.is_dir() else None,
                "bundle_missing": None if BUNDLE.is_dir() else "run `make dist` first",
                "first_window_missing": (
                    f"needs {' and '.join(display_missing)}" if display_missing else None
                ),
                "runs": args.runs,
                "page_cache": "emptied before every run" if args.drop_caches else "warm",
                "cpus": os.cpu_count(),
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
