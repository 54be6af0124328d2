"""Run every benchmark and write ``docs/benchmarks.md`` with tables, ratios and plots.

Each benchmark writes its JSON to ``docs/bench/NAME.json``; the plots go beside it as PNGs.
The page's text is ``bench/reporting/templates/benchmarks.md.j2``, filled in by ``markdown.render``.
``--no-run`` renders from the JSON already there (to rework the report without re-measuring);
``--only a,b`` runs just those benchmarks and renders from the rest as they are; ``--quick``
runs tiny versions of all into a scratch folder, to check the scripts. Usage::

    .venv/bin/python bench/report.py [--no-run] [--only drain_peers,fidelity] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from reporting.markdown import render
from reporting.sections import drain_groups

ROOT = Path(__file__).resolve().parent.parent


class Where:
    """Where the JSON, plots and page go: docs/, or a scratch folder for --quick runs."""

    out = ROOT / "docs" / "bench"
    doc = ROOT / "docs" / "benchmarks.md"


# name -> (script, extra arguments, whether it takes --out)
BENCHES: dict[str, tuple[str, list[str], bool]] = {
    "drain_peers": ("drain_peers.py", [], True),
    "limiter_peers": ("limiter_peers.py", ["--number", "50000", "--repeat", "5"], True),
    "fidelity": ("fidelity.py", [], True),
    "fairness": ("fairness.py", [], True),
    "scale_queue": ("scale_queue.py", [], True),
    "deep_store": ("deep_store.py", ["--runs", "3"], True),
    "bucket": ("bucket.py", ["--number", "300000"], False),
    "redis_limiter": ("redis_limiter.py", ["--repeat", "5"], False),
    "plan": ("plan.py", [], True),
    "tenants": ("tenants.py", ["--duration", "10", "--repeat", "2"], True),
    "workers": ("workers.py", ["--repeat", "2"], True),
    "console": (
        "console.py",
        ["--tenants", "100000", "--seconds", "20", "--shots", "docs/screenshots/many"],
        False,
    ),
    "startup": ("startup.py", ["--runs", "10"], True),
    "http_api": ("http_api.py", ["--seconds", "10", "--repeat", "2"], True),
    "providers": ("providers.py", ["--count", "3000", "--repeat", "2"], True),
    "lifetimes": ("lifetimes.py", ["--repeat", "3"], True),
    "status_events": ("status_events.py", ["--repeat", "3"], True),
}
# --quick: the same code paths in well under a minute, for checking the scripts, not numbers.
QUICK: dict[str, list[str]] = {
    "drain_peers": [
        *("--count", "300", "--sqlite-count", "1000", "--repeat", "1"),
        *("--pgqueuer-count", "1000", "--pgqueuer-batches", "10,64"),
    ],
    "limiter_peers": ["--number", "2000", "--repeat", "1", "--seconds", "0.2"],
    "fidelity": ["--seconds", "1", "--rates", "10,1000"],
    "fairness": ["--seconds", "1", "--backlog", "1000"],
    "scale_queue": ["--pg-sizes", "1000,10000", "--sqlite-sizes", "1000", "--batch-count", "500"],
    "deep_store": ["--history", "20000", "--backlog", "20000", "--count", "1000", "--runs", "1"],
    "bucket": ["--number", "10000", "--repeat", "1"],
    "redis_limiter": [
        *("--seconds", "0.2", "--repeat", "1", "--drain-count", "1000", "--drain-repeat", "1"),
    ],
    "plan": ["--quick"],
    "tenants": [
        "--tenants",
        "10,100",
        "--stores",
        "sqlite",
        "--limiter",
        "local",
        "--duration",
        "3",
    ],
    "workers": ["--tenants", "100", "--workers", "1,2", "--duration", "3"],
    "console": ["--tenants", "300", "--seconds", "2", "--queued", "2"],
    "startup": ["--runs", "2"],
    "http_api": ["--seconds", "1", "--repeat", "1"],
    "providers": ["--count", "200", "--repeat", "1"],
    "lifetimes": [
        *("--scheduled", "20000", "--due", "2000", "--together", "2000", "--repeat", "1"),
    ],
    "status_events": ["--count", "2000", "--repeat", "1"],
}
COLORS = {"omnipost": "#2b6cb0", "omnipost_wide": "#63b3ed", "procrastinate": "#dd6b20"}
COLORS |= {"ceiling": "#718096", "local": "#2b6cb0", "redis": "#c53030"}


def command(name: str, quick: bool) -> list[str]:
    script, extra, takes_out = BENCHES[name]
    cmd = [sys.executable, str(ROOT / "bench" / script), *(QUICK[name] if quick else extra)]
    return [*cmd, "--out", str(Where.out / f"{name}.json")] if takes_out else cmd


def run(name: str, quick: bool) -> float:
    """Run one benchmark, its JSON into docs/bench; returns the seconds it took."""
    t0 = time.perf_counter()
    cmd = command(name, quick)
    print(f"== {name}: {' '.join(Path(c).name if c.startswith('/') else c for c in cmd)}")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{name} failed with exit code {done.returncode}")
    if not BENCHES[name][2]:
        (Where.out / f"{name}.json").write_text(done.stdout)
    return time.perf_counter() - t0


def load(name: str) -> dict[str, Any] | None:
    path = Where.out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# -- plots ---------------------------------------------------------------------------------


def _save(fig: Any, name: str) -> str:
    fig.tight_layout()
    fig.savefig(Where.out / name, dpi=110)
    plt.close(fig)
    return f"bench/{name}"


def plot_drain(data: dict[str, Any]) -> str:
    groups = drain_groups(data)
    sides = ["omnipost", "omnipost_wide", "procrastinate", "ceiling"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.2
    for i, side in enumerate(sides):
        xs, ys, lo, hi = [], [], [], []
        for g, (_, key) in enumerate(groups):
            row = data[key].get(side)
            if row:
                xs.append(g + (i - 1.5) * width)
                ys.append(row["per_s"]["median"])
                lo.append(row["per_s"]["median"] - row["per_s"]["min"])
                hi.append(row["per_s"]["max"] - row["per_s"]["median"])
        label = {"omnipost_wide": f"omnipost (batch {data.get('wide')})"}.get(side, side)
        bars = ax.bar(xs, ys, width, yerr=[lo, hi], label=label, color=COLORS[side], capsize=2)
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), [label for label, _ in groups])
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 4)
    ax.set_ylabel("notifications / s (log)")
    ax.set_title(f"Drain of no-op jobs, concurrency {data['concurrency']} (median, min-max bars)")
    ax.legend(fontsize=8, loc="upper left", ncol=4)
    return _save(fig, "drain.png")


def plot_limiters(data: dict[str, Any]) -> str:
    allow, deny = data["in_process"]["allow"], data["in_process"]["deny"]
    names = [k for k in allow if not k.startswith("baseline")][::-1]
    fig, ax = plt.subplots(figsize=(9, 5))
    height = 0.38
    for i, (state, rows, color) in enumerate(
        (("allow (granted)", allow, "#2b6cb0"), ("deny (refused)", deny, "#dd6b20"))
    ):
        ys = [j + (0.5 - i) * height for j in range(len(names))]
        values = [rows[k]["median_ns"] / 1000 if k in rows else 0 for k in names]
        bars = ax.barh(ys, values, height, label=state, color=color)
        ax.bar_label(bars, labels=[f"{v:.2f}" if v else "" for v in values], fontsize=7, padding=2)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    for label in ax.get_yticklabels():
        if label.get_text().startswith("omnipost"):
            label.set_fontweight("bold")
    ax.set_xlabel("µs per decision (median; lower is better)")
    ax.set_title("Rate-limit decision cost in process")
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, "limiters.png")


def plot_redis(data: dict[str, Any]) -> str:
    redis = data["redis"]
    modes = [m for m in ("sequential", "concurrent_16") if m in redis]
    names = list(redis[modes[0]])
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.38
    for i, mode in enumerate(modes):
        ys = [redis[mode][n]["median_per_s"] for n in names]
        xs = [j + (i - 0.5) * width for j in range(len(names))]
        bars = ax.bar(xs, ys, width, label=mode.replace("_", " ") + " task(s)")
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax.set_xticks(range(len(names)), [textwrap.fill(n, 24) for n in names], fontsize=7)
    ax.set_ylabel("decisions / s")
    ax.set_title(f"Over Redis {redis.get('server', '')} on loopback (median)")
    ax.legend(fontsize=8)
    return _save(fig, "redis_limiters.png")


def plot_fidelity(data: dict[str, Any]) -> str:
    rates = sorted({r["rate_per_s"] for r in data["runs"]})
    fig, axes = plt.subplots(1, len(rates), figsize=(3.1 * len(rates), 3.4))
    for ax, rate in zip(axes, rates, strict=True):
        runs = [r for r in data["runs"] if r["rate_per_s"] == rate]
        t = [p[0] for p in runs[0]["timeline"]]
        ax.plot(t, [p[2] for p in runs[0]["timeline"]], "k--", lw=1, label="ideal")
        for r in runs:
            ax.plot(
                t,
                [p[1] for p in r["timeline"]],
                color=COLORS[r["backend"]],
                lw=1.5,
                label=r["backend"],
            )
        ax.set_title(f"{rate:g}/s, burst {runs[0]['burst']:g}", fontsize=9)
        ax.set_xlabel("s", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("delivered (cumulative)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Rate fidelity: delivered against min(backlog, burst + rate t)", fontsize=10)
    return _save(fig, "fidelity.png")


def plot_fairness(data: dict[str, Any]) -> str:
    stores = [s for s in ("sqlite", "postgres") if s in data]
    scenarios = [
        s for s in ("alone", "burst", "burst_limited", "burst_batched") if s in data[stores[0]]
    ]
    labels = {
        "alone": "alone",
        "burst": f"big tenant\n{data['backlog']:,} queued",
        "burst_limited": "big tenant\nlimited",
        "burst_batched": f"big tenant,\nbatches of {data.get('batch_max', '')}",
    }
    fig, axes = plt.subplots(1, len(stores), figsize=(5.5 * len(stores), 3.6), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        width = 0.38
        for i, q in enumerate(("p50_ms", "p95_ms")):
            ys = [data[store][s][q] or 0 for s in scenarios]
            xs = [j + (i - 0.5) * width for j in range(len(scenarios))]
            bars = ax.bar(xs, ys, width, label=q.replace("_ms", ""))
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
        ax.set_xticks(range(len(scenarios)), [labels[s] for s in scenarios], fontsize=8)
        ax.set_ylabel("small tenant latency, ms")
        ax.set_title("SQLite" if store == "sqlite" else "Postgres", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Fairness: a small tenant's enqueue-to-delivery latency", fontsize=10)
    return _save(fig, "fairness.png")


def plot_scale(data: dict[str, Any]) -> str:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for store, marker, ls in (("sqlite", "s", "--"), ("postgres", "o", "-")):
        rows = data.get(store) or []
        xs = [r["backlog"] for r in rows]
        name = "Postgres" if store == "postgres" else "SQLite"
        series = (
            ("other tenant's 5,000", [r["other_key"]["per_s"] for r in rows], "#2b6cb0"),
            ("the deep tenant's own", [r["same_key"]["per_s"] for r in rows], "#c53030"),
        )
        for label, ys, color in series:
            left.plot(xs, ys, marker=marker, ls=ls, color=color, label=f"{name}: {label}")
        for key, label, color in (
            ("claim_32_ms", "claim 32 (deep key)", "#c53030"),
            ("due_keys_ms", "due_keys", "#2f855a"),
            ("due_keys_deep_ms", "due_keys, deep tenant on", "#dd6b20"),
            ("depth_ms", "depth", "#805ad5"),
        ):
            ys = [r["statements"].get(key) for r in rows]
            right.plot(xs, ys, marker=marker, ls=ls, color=color, label=f"{name}: {label}")
    for ax, ylabel, title in (
        (left, "drained / s (log)", "Drain rate with a backlog queued"),
        (right, "ms per call (log)", "Statements the engine repeats"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("notifications already queued")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, "scale.png")


def plot_deep(data: dict[str, Any]) -> str:
    stores = [(s, "SQLite" if s == "sqlite" else "Postgres") for s in ("sqlite", "postgres")]
    stores = [(s, name) for s, name in stores if s in data]
    sides = [side for side in ("empty", "shallow", "deep") if side in data[stores[0][0]]]
    colors = {"empty": "#2b6cb0", "shallow": "#dd6b20", "deep": "#c53030"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(sides)
    measures = [(s, key) for s, _ in stores for key in ("stats_cli_ms", "snapshot_ms")]
    for i, side in enumerate(sides):
        offset = (i - (len(sides) - 1) / 2) * width
        per = [data[s][side]["drain_per_s"] for s, _ in stores]
        ys = [p["median"] for p in per]
        err = [[p["median"] - p["min"] for p in per], [p["max"] - p["median"] for p in per]]
        xs = [j + offset for j in range(len(stores))]
        bars = left.bar(xs, ys, width, yerr=err, label=side, color=colors[side], capsize=2)
        left.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
        xs = [j + offset for j in range(len(measures))]
        ys = [data[s][side][key]["median"] for s, key in measures]
        bars = right.bar(xs, ys, width, label=side, color=colors[side])
        right.bar_label(bars, fmt="%.1f", fontsize=6, padding=2)
    left.set_xticks(range(len(stores)), [name for _, name in stores])
    left.set_ylabel("drained / s, spawn to last (median, min-max)")
    left.set_title(f"Drain of {data['count']:,} beside what the store keeps", fontsize=9)
    labels = [f"{name}\n{what}" for _, name in stores for what in ("stats CLI", "snapshot")]
    right.set_xticks(range(len(labels)), labels, fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("ms per call (median, log)")
    right.set_title("Reading the counts", fontsize=9)
    kept = f"deep: {data['history']:,} delivered + {data['backlog']:,} queued"
    if data.get("shallow"):
        kept += f"\nshallow: {data['shallow']:,} queued"
    left.legend(fontsize=8, title=kept, title_fontsize=7, loc="lower right")
    return _save(fig, "deep_store.png")


PLOTS = {
    "drain_peers": [plot_drain],
    "limiter_peers": [plot_limiters, plot_redis],
    "fidelity": [plot_fidelity],
    "fairness": [plot_fairness],
    "scale_queue": [plot_scale],
    "deep_store": [plot_deep],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-run", action="store_true", help="render from docs/bench/*.json")
    p.add_argument("--only", default="", help="comma list of benchmarks to run")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny runs into a scratch folder: check the scripts work, not the numbers",
    )
    args = p.parse_args()
    if args.quick:  # never over the real figures
        Where.out = Path(tempfile.mkdtemp(prefix="omnipost-bench-")) / "bench"
        Where.doc = Where.out.parent / "benchmarks.md"
    Where.out.mkdir(parents=True, exist_ok=True)
    timings_path = Where.out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    if not args.no_run:
        for name in args.only.split(",") if args.only else BENCHES:
            timings[name] = round(run(name, args.quick), 1)
        timings_path.write_text(json.dumps(timings, indent=2) + "\n")
    data = {name: load(name) for name in BENCHES}
    images: dict[str, list[str]] = {}
    for name, plots in PLOTS.items():
        d = data[name]
        if d is not None:
            images[name] = [plot(d) for plot in plots]
    commands = {
        name: " ".join(["python", f"bench/{BENCHES[name][0]}", *BENCHES[name][1]])
        for name in BENCHES
    }
    Where.doc.write_text(render(data, images, timings, commands))
    print(f"wrote {Where.doc} and {sum(map(len, images.values()))} plots")


if __name__ == "__main__":
    main()
