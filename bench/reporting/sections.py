"""The figures of each section of ``docs/benchmarks.md``, taken from the benchmarks' JSON.

One function per section: it reads that benchmark's JSON and returns what the template
(``templates/benchmarks.md.j2``) needs: table rows as formatted strings, and the numbers its
sentences quote. The sentences themselves live in the template.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Data = dict[str, Any]  # one benchmark's JSON
Context = dict[str, Any]  # what one section of the template reads
Section = Callable[[Data], Context]
Rows = list[list[str]]

STORES = {"sqlite": "SQLite", "postgres": "Postgres"}


def n(value: float | None, digits: int = 0, *, sign: bool = False) -> str:
    """``1,234.5``-style, ``-`` for a figure that is missing."""
    if value is None:
        return "-"
    return f"{value:{'+' if sign else ''},.{digits}f}"


def x(value: float | None) -> str:
    """A ratio: ``0.38x``."""
    return "-" if value is None else f"{value:.2f}x"


def g(value: float) -> str:
    """As short as it goes: ``4``, ``0.5``, ``1000``."""
    return f"{value:g}"


# -- header ---------------------------------------------------------------------------------


def header(
    data: dict[str, Data | None], timings: dict[str, float], commands: dict[str, str]
) -> Context:
    found = {name: d for name, d in data.items() if d is not None}
    machine: Data = next((d["machine"] for d in found.values() if "machine" in d), {})
    drain = found.get("drain_peers", {})
    redis = found.get("limiter_peers", {}).get("redis") or {}
    peers = machine.get("packages", {})
    rows = [
        ["CPU", f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores"],
        ["OS", machine.get("platform", "?")],
        ["Python", machine.get("python", "?")],
        ["Postgres", f"{drain.get('postgres_version', '-')} on 127.0.0.1 (trust auth)"],
        ["durable commit on this disk", f"{drain.get('postgres_commit_ms', '-')} ms"],
        ["SQLite", drain.get("sqlite_version", "-")],
        ["Redis", f"{redis.get('server', '-')} on 127.0.0.1"],
        ["peers", ", ".join(f"{k} {v}" for k, v in peers.items() if v)],
    ]
    return {
        "minutes": sum(timings.values()) / 60,
        "untimed": [name for name in found if name not in timings],
        "machine": rows,
        "loads": {name: d["machine"]["load_avg_1m"] for name, d in found.items() if "machine" in d},
        "commands": list(commands.values()),
    }


# -- 1. drain -------------------------------------------------------------------------------


def drain_groups(d: Data) -> list[tuple[str, str]]:
    """(label, key) of each store and commit mode that has a comparison."""
    keys = [k for k, v in d.items() if k.startswith("postgres_") and isinstance(v, dict)]
    keys = [k for k in keys if "omnipost" in d[k]]
    groups = [("Postgres, " + k.removeprefix("postgres_"), k) for k in keys]
    return groups + ([("SQLite", "sqlite")] if "sqlite" in d else [])


def _drain_rows(d: Data) -> Rows:
    rows = []
    for store, key in drain_groups(d):
        n_jobs = d["count"]["sqlite" if key == "sqlite" else "postgres"]
        ours = d[key]["omnipost"]["per_s"]["median"]
        for side in ("omnipost", "omnipost_wide", "procrastinate", "ceiling"):
            row = d[key].get(side)
            if not row:
                continue
            per = row["per_s"]
            label = f"omnipost, batch {d['wide']}" if side == "omnipost_wide" else side
            compared = side in ("procrastinate", "ceiling")
            rows.append(
                [
                    store,
                    f"{n_jobs:,}",
                    label,
                    f"**{n(per['median'])}**",
                    f"{n(per['min'])} - {n(per['max'])}",
                    x(ours / per["median"]) if compared else "",
                    "yes" if row["all_ok"] else "**no**",
                ]
            )
    return rows


def _probe_rows(d: Data) -> Rows:
    rows = []
    for label, key in (("Postgres (async-commit)", "postgres_probe"), ("SQLite", "sqlite_probe")):
        p = d.get(key)
        if not p:
            continue
        for what in ("claim", "ack"):
            store, bare = p[f"store_{what}_ms"], p[f"bare_{what}_ms"]
            name = "claim 32" if what == "claim" else "acknowledge 32"
            rows.append([label, name, n(store, 2), n(bare, 2), x(store / bare)])
    return rows


_PAIRS = [(o, p) for o in ("omnipost", "omnipost_wide") for p in ("procrastinate", "ceiling")]


def _ratios(d: Data, key: str) -> dict[str, float | None]:
    """The ratios of one store and commit mode; None for those it lacks."""
    got = d.get(key, {}).get("ratios", {})
    return {f"{ours}_over_{peer}": got.get(f"{ours}_over_{peer}") for ours, peer in _PAIRS}


def _durable_share(d: Data) -> dict[str, float | None]:
    """Per side, its rate with durable commits over its rate with async commits."""
    fast, slow = d.get("postgres_async-commit", {}), d.get("postgres_durable", {})
    return {
        side: slow[side]["per_s"]["median"] / fast[side]["per_s"]["median"]
        if side in fast and side in slow
        else None
        for side in ("omnipost", "procrastinate", "ceiling")
    }


def _pgq_modes(d: Data) -> list[tuple[str, Data]]:
    """(label, sweep) of each commit mode the PgQueuer sweep ran in."""
    sweeps = d.get("pgqueuer") or {}
    return [
        (f"Postgres, {k}", v) for k, v in sweeps.items() if isinstance(v, dict) and "ratios" in v
    ]


def _pgq_rows(d: Data) -> Rows:
    """Store, side, batch, jobs/s (bold at the side's best batch), min - max, OmniPost over
    PgQueuer at that batch (PgQueuer's rows), all done."""
    rows = []
    for store, sweep in _pgq_modes(d):
        for side in ("omnipost", "pgqueuer"):
            for batch, row in sweep[side]["by_batch"].items():
                per = row["per_s"]
                best = int(batch) == sweep[side]["best_batch"]
                ratio = sweep["ratios"]["by_batch"][batch] if side == "pgqueuer" else None
                rows.append(
                    [
                        store,
                        side,
                        batch,
                        f"**{n(per['median'])}**" if best else n(per["median"]),
                        f"{n(per['min'])} - {n(per['max'])}",
                        x(ratio) if ratio is not None else "",
                        "yes" if row["all_ok"] else "**no**",
                    ]
                )
    return rows


def _pgq_best_rows(d: Data) -> Rows:
    """Store, side, best batch, jobs/s there, enqueue/s (median, min - max), and OmniPost over
    PgQueuer at each side's best batch and in enqueue rate (PgQueuer's rows)."""
    rows = []
    for store, sweep in _pgq_modes(d):
        for side in ("omnipost", "pgqueuer"):
            s, enq, ratios = sweep[side], sweep[side]["enqueue_per_s"], sweep["ratios"]
            theirs = side == "pgqueuer"
            rows.append(
                [
                    store,
                    side,
                    str(s["best_batch"]),
                    f"**{n(s['best_per_s'])}**",
                    f"{n(enq['median'])} ({n(enq['min'])} - {n(enq['max'])})",
                    x(ratios["omnipost_over_pgqueuer_at_best"]) if theirs else "",
                    x(ratios["enqueue_omnipost_over_pgqueuer"]) if theirs else "",
                ]
            )
    return rows


def _pgq(d: Data) -> dict[str, Data] | None:
    """Per commit mode (``async-commit``, ``durable``): each side's best batch and rate, and
    OmniPost over PgQueuer at the best batches (``ratio``) and in enqueue rate
    (``enqueue_ratio``); None when the sweep did not run."""
    sweeps = {label.removeprefix("Postgres, "): s for label, s in _pgq_modes(d)}
    if not sweeps:
        return None
    return {
        mode: {
            "omnipost_batch": s["omnipost"]["best_batch"],
            "omnipost_per_s": s["omnipost"]["best_per_s"],
            "pgqueuer_batch": s["pgqueuer"]["best_batch"],
            "pgqueuer_per_s": s["pgqueuer"]["best_per_s"],
            "omnipost_enqueue_per_s": s["omnipost"]["enqueue_per_s"]["median"],
            "pgqueuer_enqueue_per_s": s["pgqueuer"]["enqueue_per_s"]["median"],
            "ratio": s["ratios"]["omnipost_over_pgqueuer_at_best"],
            "enqueue_ratio": s["ratios"]["enqueue_omnipost_over_pgqueuer"],
        }
        for mode, s in sweeps.items()
    }


def _wide_gain(d: Data, key: str) -> float | None:
    """OmniPost's rate at the wide batch over its rate at the default one."""
    run = d.get(key, {})
    if "omnipost" not in run or "omnipost_wide" not in run:
        return None
    return float(run["omnipost_wide"]["per_s"]["median"] / run["omnipost"]["per_s"]["median"])


def drain(d: Data) -> Context:
    return {
        **d,
        "wide_gain": {
            name: _wide_gain(d, key)
            for name, key in (("Postgres", "postgres_async-commit"), ("SQLite", "sqlite"))
        },
        "rows": _drain_rows(d),
        "probes": _probe_rows(d),
        "pg": _ratios(d, "postgres_async-commit"),
        "lite": _ratios(d, "sqlite"),
        "durable": _ratios(d, "postgres_durable") if "postgres_durable" in d else None,
        "durable_share": _durable_share(d),
        "pgq": _pgq(d),
        "pgq_rows": _pgq_rows(d),
        "pgq_best_rows": _pgq_best_rows(d),
    }


# -- 2. limiters ----------------------------------------------------------------------------


def _cheapest(allow: Data, prefix: str) -> tuple[str, float]:
    """The fastest row whose name starts with ``prefix``: (name, µs)."""
    rows = {k: v["median_ns"] / 1000 for k, v in allow.items() if k.startswith(prefix)}
    name = min(rows, key=lambda k: rows[k])
    return name, rows[name]


def _limiter_rows(allow: Data, deny: Data) -> Rows:
    rows = []
    for name, row in allow.items():
        refused = deny.get(name)
        rows.append(
            [
                name,
                n(row["median_ns"] / 1000, 2),
                x(row["over_try_take"]),
                n(refused["median_ns"] / 1000, 2) if refused else "(would wait)",
                x(refused["over_try_take"]) if refused else "-",
            ]
        )
    return rows


def _redis_rows(redis: Data) -> Rows:
    return [
        [
            mode.replace("_", " "),
            name,
            n(row["median_per_s"]),
            n(row["median_us"], 1),
            x(row["over_reserve_1"]),
        ]
        for mode in ("sequential", "concurrent_16")
        for name, row in redis.get(mode, {}).items()
    ]


def _redis_pair(redis: Data) -> tuple[float, str, float] | None:
    """Sequentially: one-bucket ``RedisLimiter.reserve`` µs, the cheapest ``limits`` row, its µs."""
    seq = redis.get("sequential", {})
    ours = seq.get("omnipost RedisLimiter.reserve (1 bucket)", {}).get("median_us")
    theirs = {k: v["median_us"] for k, v in seq.items() if k.startswith("limits")}
    if not ours or not theirs:
        return None
    name = min(theirs, key=lambda k: theirs[k])
    return ours, name, theirs[name]


def limiters(d: Data) -> Context:
    allow, deny = d["in_process"]["allow"], d["in_process"]["deny"]
    redis = d.get("redis")
    return {
        **d,
        "rows": _limiter_rows(allow, deny),
        "try_take_us": allow["omnipost TokenBucket.try_take"]["median_ns"] / 1000,
        "peers": [_cheapest(allow, p) for p in ("aiolimiter acquire", "limits", "pyrate-limiter")],
        "redis_rows": _redis_rows(redis) if redis else None,
        "redis_pair": _redis_pair(redis) if redis else None,
    }


# -- 3. fidelity ----------------------------------------------------------------------------


def _fidelity_row(r: Data) -> list[str]:
    w1 = r["windows"].get("1.0", {})
    worst = max(r["windows"].values(), key=lambda w: w["max"] / w["envelope"])
    return [
        f"{r['rate_per_s']:g}/s",
        f"{r['burst']:g}",
        r["backend"],
        f"{r['delivered']:,} / {r['ideal']:,.0f}",
        f"**{r['achieved_over_ideal']:.3f}**",
        f"{r.get('second_half_rate_over_rate', 0):.3f}",
        f"{w1.get('max', '-')} / {w1.get('envelope', '-')}",
        f"{worst['max'] / worst['envelope']:.2f}",
        "yes" if r["all_within_envelope"] else "**NO**",
        "yes" if r.get("all_within_stated_lag", r["all_within_envelope"]) else "**NO**",
    ]


def fidelity(d: Data) -> Context:
    runs = d["runs"]
    near: dict[str, list[str]] = {}  # backend -> rates within 3 % of the ideal
    for r in runs:
        if r["achieved_over_ideal"] >= 0.97:
            near.setdefault(r["backend"], []).append(f"{r['rate_per_s']:g}/s")
    return {
        **d,
        "rows": [_fidelity_row(r) for r in runs],
        "seconds": runs[0]["seconds"],
        "all_ok": all(r["all_within_envelope"] for r in runs),
        "all_within_lag": all(r.get("all_within_stated_lag", False) for r in runs),
        "over": [
            {
                "backend": r["backend"],
                "rate": g(r["rate_per_s"]),
                "first_s": r.get("first_delivery_s"),
                "windows": [
                    f"{w} s: {v['max']} against {v['envelope']:g}"
                    for w, v in r["windows"].items()
                    if not v["ok"]
                ],
            }
            for r in runs
            if not r["all_within_envelope"]
        ],
        "near": near,
        "lowest": min(runs, key=lambda r: r.get("second_half_rate_over_rate", 1)),
    }


# -- 4. fairness ----------------------------------------------------------------------------


def _fairness_row(store: str, scenario: str, r: Data) -> list[str]:
    over = r.get("over_alone", {})
    burst = scenario != "alone"
    return [
        STORES[store],
        scenario.replace("_", ", "),
        f"{r['small_delivered']}/{r['small_sent']}",
        n(r["p50_ms"], 1),
        n(r["p95_ms"], 1),
        n(r["p99_ms"], 1),
        n(r["max_ms"], 1),
        x(over.get("p95_ms")) if over else "",
        n(r["big_per_s"]) if burst else "",
        n(r.get("fifo_wait_estimate_s"), 1) if burst else "",
    ]


def fairness(d: Data) -> Context:
    return {
        **d,
        "rows": [
            _fairness_row(store, scenario, r)
            for store in STORES
            for scenario, r in (d.get(store) or {}).items()
        ],
        "p95": {name: d[store] for store, name in STORES.items() if d.get(store)},
        # The large tenant one send per call, against what its senders could carry.
        "ceiling_per_s": d["concurrency"] / (d["latency_ms"] / 1000),
        "busy": {
            name: d[store]["burst"]["big_per_s"] * d["latency_ms"] / 1000
            for store, name in STORES.items()
            if d.get(store) and "burst" in d[store]
        },
    }


# -- 5. scale -------------------------------------------------------------------------------


def _scale_rows(d: Data) -> Rows:
    rows = []
    names = {"sqlite": "SQLite", "sqlite_analyzed": "SQLite, after ANALYZE", "postgres": "Postgres"}
    for store, name in names.items():
        for r in d.get(store) or []:
            s, same = r["statements"], r["same_key"]
            rows.append(
                [
                    name,
                    f"{r['backlog']:,}",
                    n(r["bulk_insert_s"], 1),
                    n(r["other_key"]["per_s"]),
                    n(same["per_s"]) + ("" if same["finished"] else " (stopped)"),
                    n(s["claim_32_ms"], 1),
                    n(s["due_keys_ms"], 1),
                    n(s.get("due_keys_deep_ms"), 1),
                    n(s["depth_ms"], 1),
                ]
            )
    return rows


def _ends(rows: list[Data], key: str) -> tuple[int, float, int, float] | None:
    """A statement's time at the smallest and largest backlog: (size, ms, size, ms)."""
    timed = [(r["backlog"], r["statements"].get(key)) for r in rows]
    timed = [(size, ms) for size, ms in timed if ms is not None]
    if len(timed) < 2:
        return None
    (small, first), (large, last) = timed[0], timed[-1]
    return small, first, large, last


def scale(d: Data) -> Context:
    pg = d.get("postgres") or []
    plain = {r["backlog"]: r for r in d.get("sqlite") or []}
    analyzed = (d.get("sqlite_analyzed") or [None])[0]
    before = plain.get(analyzed["backlog"]) if analyzed else None
    sizes = {store: [r["backlog"] for r in d.get(store) or []] for store in STORES}
    return {
        **d,
        "rows": _scale_rows(d),
        "pg_only": sorted(set(sizes["postgres"]) - set(sizes["sqlite"])),
        "analyze": (before, analyzed) if before and analyzed else None,
        "due_keys_deep": _ends(pg, "due_keys_deep_ms"),
        "depth": _ends(pg, "depth_ms"),
    }


# -- 6. deep store --------------------------------------------------------------------------

SIDES = ("empty", "shallow", "deep")


def _deep_row(d: Data, name: str, side: str, s: Data) -> list[str]:
    per, steady = s["drain_per_s"], s.get("steady_per_s")
    kept = s["setup"].get("history", 0) + s["setup"].get("backlog", 0)
    if side == "deep" and "history" not in s["setup"]:  # JSON from before the field
        kept = d["history"] + d["backlog"]
    return [
        name,
        side,
        f"{kept:,}",
        n(s["setup"]["db_bytes"] / 2**20, 1),
        f"**{n(per['median'])}** ({n(per['min'])} - {n(per['max'])})",
        n(steady["median"]) if steady else "-",
        n(s["enqueue_s"]["median"], 2),
        n(s["stats_cli_ms"]["median"]),
        n(s["snapshot_ms"]["median"], 1),
        "yes" if s["counts"]["match"] else "**NO**",
    ]


def _deep_statement_rows(d: Data) -> Rows:
    keys: tuple[str, ...] = ("depth_ms", "due_keys_ms", "outcomes_60s_ms", "dead_ms")
    keys += tuple(f"notifications_{t}_ms" for t in ("history", "backlog", "fresh"))
    return [
        [name, side, *(n(d[store][side]["statements"].get(k), 1) for k in keys)]
        for store, name in STORES.items()
        if d.get(store)
        for side in SIDES
        if side in d[store]
    ]


def deep(d: Data) -> Context:
    present = {store: name for store, name in STORES.items() if d.get(store)}
    return {
        **d,
        "rows": [
            _deep_row(d, name, side, d[store][side])
            for store, name in present.items()
            for side in SIDES
            if side in d[store]
        ],
        "statement_rows": _deep_statement_rows(d),
        "stores": {name: d[store] for store, name in present.items()},
    }


# -- what-if planning -----------------------------------------------------------------------


def _plan_row(r: Data) -> list[str]:
    wall, cpu = r["wall_s"], r["cpu_s"]
    return [
        f"{r['count']:,}",
        f"**{n(wall['median'], 2)}** ({n(wall['min'], 2)} - {n(wall['max'], 2)})",
        n(cpu["median"], 2),
        n(r["predicted_drain_s"]),
        f"{n(r['drain_over_wall'])}x",
        n(r["planned_per_s"]),
        n(r["peak_rss_mib"]),
    ]


def plan(d: Data) -> Context:
    """Rows: notifications, wall s (median, min - max), CPU s, predicted drain s, drain over
    planning time, planned per s, peak RSS MiB. ``largest``: the biggest size's figures."""
    return {**d, "rows": [_plan_row(r) for r in d["sizes"]], "largest": d["sizes"][-1]}


# -- 7. micro-benchmarks --------------------------------------------------------------------


def micro(bucket: Data | None, redis: Data | None) -> Context | None:
    rows = []
    if bucket:
        rows.append(
            [
                "`bench/bucket.py`: `TokenBucket.try_take`, time passed in",
                f"{bucket['subject']['best_ns']} ns (best)",
                f"inline arithmetic {bucket['ceiling_inline']['best_ns']} ns",
                x(bucket["ratio_best"]),
            ]
        )
    redis = redis or {}
    for mode in ("sequential", "concurrent_16"):
        r = redis.get(mode)
        if r:
            rows.append(
                [
                    f"`bench/redis_limiter.py`: `RedisLimiter.reserve`"
                    f" ({redis.get('keys_per_reservation', 3)} buckets), {mode.replace('_', ' ')}",
                    f"{n(r['reserve']['median_per_s'])}/s",
                    f"EVALSHA `return 1`: {n(r['evalsha_return_1']['median_per_s'])}/s",
                    x(r["reserve_over_ceiling"]),
                ]
            )
            bare = r.get("bare_evalsha_return_1")
            if bare:
                rows.append(
                    [
                        f"the same, {mode.replace('_', ' ')}, against the bare call",
                        f"{n(r['reserve']['median_per_s'])}/s",
                        f"`return 1` packed once, own connections: {n(bare['median_per_s'])}/s",
                        x(r["reserve_over_bare"]),
                    ]
                )
    drain = redis.get("drain")
    if drain:
        rows.append(
            [
                f"`bench/redis_limiter.py`: a drain of {n(drain['count'])} on SQLite with the"
                " `RedisLimiter`",
                f"{n(drain['redis']['median_per_s'])}/s",
                f"with the `LocalLimiter`: {n(drain['local']['median_per_s'])}/s",
                x(drain["redis_over_local"]),
            ]
        )
    return {"rows": rows} if rows else None
