"""One sweep as the dashboard shows it, in JSON-ready values: every run's leaderboard row, curve,
timings and command line, its runs read in one snapshot of a read-only store."""

from __future__ import annotations

import math
import shlex
import time
from typing import Any

from trainer.errors import TrainerError
from trainer.sweep.report import leaderboard, pareto
from trainer.sweep.search.distributions import LOG_SCALE, distribution
from trainer.sweep.store import steering
from trainer.sweep.store.database import RunRecord, SweepStore


def finite(value: Any) -> float | None:
    """`value` as a float when it is a finite number (JSON has no NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _timings(record: RunRecord, entry: dict[str, Any]) -> dict[str, Any]:
    """Compile seconds and steady step milliseconds: the summary's once the run ended, its
    latest epoch's while it runs; whether it compiled, and its cache hits and misses."""
    perf = (record.summary or {}).get("perf") or {}
    last = record.history[-1] if record.history else {}
    steady = finite(perf.get("steady_step_s"))
    step_ms = steady * 1000.0 if steady else finite(perf.get("step_ms"))
    counts = leaderboard.cache_counts(entry)
    return {
        "compile_s": finite(entry.get("compile_s", last.get("perf/compile_s"))),
        "step_ms": step_ms if step_ms is not None else finite(last.get("perf/step_ms")),
        "compiled": entry.get("compiled"),
        "cache_hits": None if counts is None else counts[0],
        "cache_misses": None if counts is None else counts[1],
    }


def _curves(record: RunRecord, names: list[str]) -> dict[str, list[float | None]]:
    """The run's per-epoch values of each objective, with the epochs they were logged at."""
    rows = [row for row in record.history if any(name in row for name in names)]
    curves = {"epoch": [row.get("epoch", i + 1) for i, row in enumerate(rows)]}
    for name in names:
        curves[name] = [finite(row.get(name)) for row in rows]
    return curves


def run_row(entry: dict[str, Any], record: RunRecord, config: dict, names: list[str]) -> dict:
    """One run: its leaderboard entry (results.json's), timings, curves and command line."""
    now = time.time()
    beat = record.heartbeat_at if record.state == "running" else None
    return {
        "id": entry["id"],
        "state": entry["state"],
        "params": entry["params"],
        "metric": finite(entry["metric"]),
        "objectives": {k: finite(v) for k, v in (entry.get("objectives") or {}).items()},
        "pareto": bool(entry.get("pareto")),
        "epochs": entry["epochs"],
        "duration_s": entry["duration_s"],
        "devices": entry["devices"],
        "host": record.host,
        "preemptions": entry["preemptions"],  # stopped by the cluster with a checkpoint
        "losses": entry["losses"],  # lost with its agent, job or host
        "rerun_of": record.rerun_of,
        "reason": entry["reason"],
        "heartbeat_age_s": None if beat is None else max(now - beat, 0.0),
        "command": "python -m trainer " + shlex.join(leaderboard.best_overrides(config, entry)),
        "curves": _curves(record, names),
        "lineage": entry.get("lineage") or [],  # method pbt: its values and copies by epoch
        **_timings(record, entry),
    }


def parameters(config: dict, rows: list[dict]) -> list[dict[str, Any]]:
    """The swept parameters in the definition's order ({name, log}); those of runs otherwise."""
    specs = config.get("parameters") or {}
    names = list(specs) or list(dict.fromkeys(k for row in rows for k in row["params"]))
    out = []
    for name in names:
        spec = specs.get(name) if isinstance(specs.get(name), dict) else {}
        if spec and distribution(spec) == "constant":
            continue  # the same on every run
        out.append({"name": name, "log": bool(spec) and distribution(spec) in LOG_SCALE})
    return out


def _steered(res: dict[str, Any]) -> str | None:
    """Who put the sweep in its state and when (`paused by ada@node1 at ... UTC`), when its
    owner did (as `ls` and `show` say it); None otherwise."""
    change = steering.Change.of(res.get("state_changed"))
    return change.said() if change is not None and change.state == res.get("state") else None


def view(store: SweepStore, sweep_id: str, where: str) -> dict[str, Any]:
    """The sweep's page data: its definition's essentials, counts by state and every run
    (ranked as the leaderboard ranks them); `where` names the store (password-free)."""
    config = store.config
    if config is None:
        raise TrainerError(f"sweep {sweep_id} has no configuration yet: it is being created")
    records = store.runs()
    res = leaderboard.results(store, sweep_id, records)
    goals = pareto.objectives(config)
    names = [g["name"] for g in goals]
    by_id = {r.id: r for r in records}
    rows = [run_row(e, by_id[e["id"]], config, names) for e in res["runs"]]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {
        "sweep_id": sweep_id,
        "where": where,
        "method": res["method"],
        "engine": res["engine"],
        "objectives": goals,
        "parameters": parameters(config, rows),
        "early_terminate": (config.get("early_terminate") or {}).get("type"),
        "counts": counts,
        "steered": _steered(res),
        "best": (res["best"] or {}).get("id"),
        "pareto_front": [e["id"] for e in res.get("pareto_front") or ()],
        "runs": rows,
    }
