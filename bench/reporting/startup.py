"""Section 11 of docs/benchmarks.md: how fast the command line answers (``bench/startup.py``)."""

from __future__ import annotations

from reporting.sections import Context, Data

__all__ = ["startup"]

_NAMES = {
    "python": "`python -c pass` (the interpreter alone)",
    "version": "`omnipost --version`",
    "help": "`omnipost --help`",
    "tenant_list": "`omnipost tenant list` (SQLite)",
    "stats": "`omnipost stats` (SQLite)",
}


def startup(d: Data) -> Context:
    targets = d["targets_s"]
    rows = []
    for name, label in _NAMES.items():
        c = d["commands"][name]
        target = targets.get(name)
        met = "" if target is None else (" (met)" if d["met"][name] else " (**not met**)")
        rows.append(
            [
                label,
                f"{c['median_s']:.3f}",
                f"{c['min_s']:.3f}-{c['max_s']:.3f}",
                "" if target is None else f"{target:g}{met}",
            ]
        )
    return {"runs": d["runs"], "rows": rows, "load": d["machine"]["load_avg_1m"]}
