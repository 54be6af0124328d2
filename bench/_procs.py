"""CPU seconds of the servers a benchmark leans on (Postgres, Redis), read from /proc.

Postgres runs a process per connection, which exits with its connection: its CPU is counted
into the postmaster's ``cutime``/``cstime`` once reaped, so the postmaster's own and children's
times plus every live backend's give the cluster's CPU at an instant. Redis is one process
(its threads are counted in its times). Linux only; elsewhere every figure is None.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: fields start after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def _processes() -> dict[int, tuple[str, int]]:
    """Every process: pid -> (command name, parent pid)."""
    found: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        found[int(entry.name)] = (name, int(fields[1]))
    return found


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds so far of one live process (None: gone, or not Linux)."""
    fields = _stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def peak_rss_mb(pid: int) -> float | None:
    """The peak resident set of one live process since its exec (``VmHWM``), in MB. Not
    ``ru_maxrss`` from ``wait4``: Linux carries a child's high-water mark over from the parent
    it was forked from, so a benchmark's own size would show in its workers'."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None


def server_cpu_s() -> dict[str, float | None]:
    """CPU seconds so far of the Postgres cluster and of Redis (None: not found here)."""
    if not Path("/proc").is_dir():
        return {"postgres": None, "redis": None}
    procs = _processes()
    postgres: float | None = None
    redis: float | None = None
    for pid, (name, parent) in procs.items():
        fields = _stat(pid)
        if fields is None:
            continue
        own = (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime
        if name.startswith("redis-server"):
            redis = (redis or 0.0) + own
        elif name.startswith("postgres") and procs.get(parent, ("", 0))[0] != "postgres":
            children = (int(fields[13]) + int(fields[14])) * _TICK_S  # cutime, cstime
            postgres = (postgres or 0.0) + own + children  # the postmaster
        elif name.startswith("postgres"):
            postgres = (postgres or 0.0) + own  # a live backend or helper
    return {"postgres": postgres, "redis": redis}
