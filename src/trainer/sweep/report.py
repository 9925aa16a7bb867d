"""What a local sweep produced: the leaderboard table, results.json, best.yaml and sweep.png."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from trainer.sweep import engine
from trainer.sweep.agent import fixed_overrides
from trainer.sweep.distributions import LOG_SCALE
from trainer.sweep.store import SweepStore


def _compile_info(summary: dict | None) -> dict[str, Any]:
    if not summary:
        return {}
    info: dict[str, Any] = {}
    perf = summary.get("perf") or {}
    if "compile_s" in perf:
        info["compile_s"] = perf["compile_s"]
    section = summary.get("compile") or {}
    if "enabled" in section:
        info["compiled"] = bool(section["enabled"])
    for key, value in section.items():
        if "cache_hit" in key or "cache_miss" in key:
            info[key] = value
    return info


def _rank_key(metric: dict | None):
    sign = -1.0 if metric and metric.get("goal", "minimize") == "maximize" else 1.0

    def key(entry: dict) -> tuple:
        value = entry["metric"]
        ok = value is not None and not (isinstance(value, float) and math.isnan(value))
        return (0 if ok else 1, sign * value if ok else 0.0)

    return key


def results(store: SweepStore, sweep_id: str) -> dict[str, Any]:
    """The results dict (also results.json): every run, ranked by the sweep metric."""
    config = store.config
    metric = config.get("metric")
    runs: list[dict[str, Any]] = []
    for r in store.runs():
        if r.superseded:
            continue
        runs.append(
            {
                "id": r.id,
                "state": r.state,
                "params": r.params,
                "metric": engine.metric_value(r, metric),
                "run_dir": r.run_dir,
                "exit_code": r.exit_code,
                "log": r.log_path,
                "duration_s": r.duration_s,
                "epochs": len(r.history),
                **_compile_info(r.summary),
            }
        )
    runs.sort(key=_rank_key(metric))
    ranked = [e for e in runs if e["metric"] is not None and e["state"] in ("finished", "stopped")]
    return {
        "sweep_id": sweep_id,
        "backend": "local",
        "method": config.get("method"),
        "metric": metric,
        "runs": runs,
        "best": ranked[0] if ranked else None,
    }


def best_overrides(config: dict, best: dict | None) -> list[str]:
    """The Hydra overrides that reproduce the best run: fixed overrides + its parameters."""
    if best is None:
        return []
    from trainer.sweep.trial_argv import hydra_value

    params = [f"{key}={hydra_value(value)}" for key, value in best["params"].items()]
    return [*fixed_overrides(config), *params]


def write(store: SweepStore, sweep_id: str, directory: Path) -> dict[str, Any]:
    """Write results.json and best.yaml into the sweep directory; return the results."""
    res = results(store, sweep_id)
    (directory / "results.json").write_text(json.dumps(res, indent=2, default=str))
    overrides = best_overrides(store.config, res["best"])
    header = (
        f"# Best run of sweep {sweep_id}: python -m trainer " + " ".join(overrides) + "\n"
        if overrides
        else f"# Sweep {sweep_id} has no finished run with a metric yet.\n"
    )
    (directory / "best.yaml").write_text(header + yaml.safe_dump(overrides, sort_keys=False))
    return res


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cache_hits(entry: dict[str, Any]) -> str:
    """'hits/misses' of the compile caches (FX graph, AOTAutograd) in one run; '-' if eager."""
    if not entry.get("compiled"):
        return "-"

    def total(kind: str) -> int:
        return int(sum(v for k, v in entry.items() if kind in k and isinstance(v, int | float)))

    return f"{total('cache_hit')}/{total('cache_miss')}"


def print_leaderboard(res: dict[str, Any]) -> None:
    """The leaderboard on the console: rank, run, parameters, metric, state, duration."""
    from rich.console import Console
    from rich.table import Table

    metric = res["metric"] or {}
    table = Table(title=f"sweep {res['sweep_id']} ({res.get('method')})")
    for col in ("rank", "run", "params", metric.get("name", "metric"), "state", "duration"):
        table.add_column(col, overflow="fold")
    table.add_column("compile_s")
    table.add_column("cache hit/miss")
    for i, e in enumerate(res["runs"], start=1):
        params = " ".join(f"{k}={_fmt(v)}" for k, v in e["params"].items())
        dur = e.get("duration_s")
        table.add_row(
            str(i),
            e["id"],
            params,
            "-" if e["metric"] is None else _fmt(e["metric"]),
            e["state"],
            "-" if dur is None else f"{dur:.1f}s",
            "-" if e.get("compile_s") is None else f"{e['compile_s']:.2f}",
            _cache_hits(e),
        )
    console = Console()
    console.print(table)
    if res["best"]:
        console.print(
            f"best: {res['best']['id']}  {metric.get('name')}={_fmt(res['best']['metric'])}"
        )


def plot(store: SweepStore, res: dict[str, Any], path: Path) -> Path:
    """sweep.png: metric vs each swept parameter (log axis for log distributions) and the
    metric over time, best run marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = store.config
    params = list(config.get("parameters", {}))
    name = (res["metric"] or {}).get("name", "metric")
    rows = [e for e in res["runs"] if e["metric"] is not None]
    best = res["best"]["id"] if res["best"] else None
    fig, axes = plt.subplots(1, len(params) + 1, figsize=(4 * (len(params) + 1), 3.5))
    axes = list(axes) if len(params) else [axes]
    for ax, key in zip(axes, params, strict=False):
        xs = [e["params"].get(key) for e in rows]
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
        labels = xs if numeric else [str(x) for x in xs]
        ax.scatter(labels, [e["metric"] for e in rows], s=18)
        for e, x in zip(rows, labels, strict=True):
            if e["id"] == best:
                ax.scatter([x], [e["metric"]], marker="*", s=160, color="red", label="best")
        if numeric and config["parameters"][key].get("distribution") in LOG_SCALE:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(name)
    ax = axes[-1]
    by_id = {r.id: r for r in store.runs()}
    timed = sorted(rows, key=lambda e: by_id[e["id"]].ended_at or 0)
    ax.plot(range(1, len(timed) + 1), [e["metric"] for e in timed], "o-", ms=4)
    for i, e in enumerate(timed, start=1):
        if e["id"] == best:
            ax.scatter([i], [e["metric"]], marker="*", s=160, color="red", label="best")
    ax.set_xlabel("run (in order of completion)")
    ax.set_ylabel(name)
    if best:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
