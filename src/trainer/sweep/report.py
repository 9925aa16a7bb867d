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


def failure_reason(log_tail: str | None) -> str | None:
    """Why a run failed, from the end of its log: the last error line (an exception, CUDA out
    of memory), else its last line."""
    lines = [line.strip() for line in (log_tail or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "out of memory" in line:
            return line[:200]
    return lines[-1][:200] if lines else None


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
                "reason": failure_reason(r.log_tail) if r.state in ("failed", "crashed") else None,
                "devices": r.devices or [],
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
        "engine": engine.engine_name(),  # which code decided the runs
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
    gpus = any(e.get("devices") for e in res["runs"])
    for col in ("rank", "run", metric.get("name", "metric"), "state", "time", "compile_s"):
        table.add_column(col, no_wrap=True)
    if gpus:
        table.add_column("gpu", no_wrap=True)
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
            *([",".join(e.get("devices") or ()) or "-"] * gpus),
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
    """sweep.png (see `figure`)."""
    import matplotlib.pyplot as plt

    fig = figure(store, res)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(store: SweepStore, res: dict[str, Any]):
    """The sweep's figure: titled with sweep, method, metric and goal; the metric against each
    swept parameter (log axis for log distributions, a categorical axis for non-numbers); the
    metric over runs in order of completion with the best-so-far curve and integer run ticks.
    The best run is a red star, runs hyperband stopped are crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = store.config
    params = list(config.get("parameters", {}))
    metric = res["metric"] or {}
    name = metric.get("name", "metric")
    rows = [e for e in res["runs"] if e["metric"] is not None]
    fig, axes = plt.subplots(1, len(params) + 1, figsize=(4 * (len(params) + 1), 3.8))
    axes = list(axes) if len(params) else [axes]
    fig.suptitle(
        f"sweep {res['sweep_id']} ({res['method']}): {name}, goal {metric.get('goal', '-')}"
    )
    for ax, key in zip(axes, params, strict=False):
        xs = _param_axis(ax, key, config["parameters"][key], [e["params"].get(key) for e in rows])
        _points(ax, rows, xs, res)
        ax.set_xlabel(key)
        ax.set_ylabel(name)
    _over_runs(axes[-1], store, rows, res, maximize=metric.get("goal") == "maximize")
    axes[-1].set_ylabel(name)
    fig.tight_layout()
    return fig


def _param_axis(ax: Any, key: str, spec: dict[str, Any], xs: list[Any]) -> list[Any]:
    """The x positions of `xs` on `ax`: numbers as they are (log axis for a log distribution),
    anything else one tick per category, in the order of the sweep's `values`."""
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs):
        if spec.get("distribution") in LOG_SCALE:
            ax.set_xscale("log")
        return xs
    labels = [str(v) for v in spec.get("values", [])]
    labels += sorted({str(x) for x in xs} - set(labels))
    ax.set_xticks(range(len(labels)), labels)
    return [labels.index(str(x)) for x in xs]


def _points(ax: Any, rows: list[dict[str, Any]], xs: list[Any], res: dict[str, Any]) -> None:
    """Each run's metric at `xs`: dots, crosses for hyperband-stopped runs, a star for the best."""
    best = res["best"]["id"] if res["best"] else None
    ys = [e["metric"] for e in rows]
    marks = {
        "run": [i for i, e in enumerate(rows) if e["state"] != "stopped"],
        "stopped by hyperband": [i for i, e in enumerate(rows) if e["state"] == "stopped"],
        "best": [i for i, e in enumerate(rows) if e["id"] == best],
    }
    style = {"run": ("o", 18, None), "stopped by hyperband": ("x", 40, "gray")}
    style["best"] = ("*", 160, "red")
    for label, picked in marks.items():
        if picked:
            marker, size, color = style[label]
            xy = [xs[i] for i in picked], [ys[i] for i in picked]
            ax.scatter(*xy, marker=marker, s=size, color=color, label=label)


def _over_runs(
    ax: Any, store: SweepStore, rows: list[dict[str, Any]], res: dict[str, Any], maximize: bool
) -> None:
    from matplotlib.ticker import MaxNLocator

    by_id = {r.id: r for r in store.runs()}
    timed = sorted(rows, key=lambda e: by_id[e["id"]].ended_at or 0)
    order = list(range(1, len(timed) + 1))
    ax.plot(order, [e["metric"] for e in timed], "-", color="lightgray", lw=1)
    _points(ax, timed, order, res)
    best_so_far, current = [], None
    for e in timed:
        better = current is None or (e["metric"] > current if maximize else e["metric"] < current)
        current = e["metric"] if better else current
        best_so_far.append(current)
    ax.step(order, best_so_far, where="post", color="tab:green", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("run (in order of completion)")
    if timed:
        ax.legend(fontsize="small")
