"""What a local sweep produced: the leaderboard table, results.json, best.yaml and sweep.png."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainer.layout import SweepLayout, write_text_atomic
from trainer.sweep import engine
from trainer.sweep.command import fixed_overrides
from trainer.sweep.distributions import LOG_SCALE
from trainer.sweep.store import SweepStore

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


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
    """The arguments of `python -m trainer` that reproduce the best run: the trials' fixed
    arguments (the user's config dir and name, fixed overrides) + its parameters."""
    if best is None:
        return []
    from trainer.sweep.trial_argv import hydra_value

    params = [f"{key}={hydra_value(value)}" for key, value in best["params"].items()]
    return [*fixed_overrides(config), *params]


def write(store: SweepStore, sweep_id: str, layout: SweepLayout) -> dict[str, Any]:
    """Write results.json and best.yaml into the sweep directory (atomically: several agents
    refresh them); return the results."""
    res = results(store, sweep_id)
    write_text_atomic(layout.results, json.dumps(res, indent=2, default=str))
    overrides = best_overrides(store.config, res["best"])
    header = (
        f"# Best run of sweep {sweep_id}: python -m trainer " + " ".join(overrides) + "\n"
        if overrides
        else f"# Sweep {sweep_id} has no finished run with a metric yet.\n"
    )
    write_text_atomic(layout.best, header + yaml.safe_dump(overrides, sort_keys=False))
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


def _params(entry: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in entry["params"].items())


def leaderboard(res: dict[str, Any], *, with_params: bool) -> Table:
    """The leaderboard table: rank, run, metric, state, duration, compile time, cache hits; the
    parameters as a last column when `with_params`."""
    from rich.table import Table

    metric = res["metric"] or {}
    table = Table(title=f"sweep {res['sweep_id']} ({res.get('method')})")
    for col in ("rank", "run", metric.get("name", "metric"), "state", "time", "compile_s"):
        table.add_column(col, no_wrap=True)
    table.add_column("cache hit/miss", no_wrap=True)
    if with_params:
        table.add_column("params", overflow="fold")
    for i, e in enumerate(res["runs"], start=1):
        dur = e.get("duration_s")
        table.add_row(
            str(i),
            e["id"],
            "-" if e["metric"] is None else _fmt(e["metric"]),
            e["state"],
            "-" if dur is None else f"{dur:.1f}s",
            "-" if e.get("compile_s") is None else f"{e['compile_s']:.2f}",
            _cache_hits(e),
            *([_params(e)] * with_params),
        )
    return table


def print_leaderboard(res: dict[str, Any], console: Console | None = None) -> None:
    """The leaderboard on the console. The parameters share the table when they fit its width
    unbroken; otherwise (a narrow terminal, a log file: 80 columns) each run's parameters follow
    the table on their own line, so no column is squeezed to a few characters."""
    from rich.console import Console
    from rich.measure import Measurement

    console = console or Console()
    table = leaderboard(res, with_params=True)
    unbounded = console.options.update_width(10_000)  # the table's natural width, unwrapped
    fits = Measurement.get(console, unbounded, table).maximum <= console.width
    console.print(table if fits else leaderboard(res, with_params=False))
    if not fits and res["runs"]:
        console.print("parameters:")
        for i, e in enumerate(res["runs"], start=1):
            lead = f"  {i:>2} {e['id']}  "
            text = textwrap.fill(
                _params(e),
                width=max(console.width, len(lead) + 20),
                initial_indent=lead,
                subsequent_indent=" " * len(lead),
                break_long_words=False,
                break_on_hyphens=False,
            )
            console.print(text, highlight=False, soft_wrap=True, markup=False)
    metric = res["metric"] or {}
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
