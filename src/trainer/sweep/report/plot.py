"""sweep.png: the metric against each swept parameter and over the runs (best so far), and for
two objectives the Pareto front; the best run, hyperband-stopped and pruned runs marked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.sweep.search.distributions import LOG_SCALE
from trainer.sweep.store.database import SweepStore


def plot(store: SweepStore, res: dict[str, Any], path: Path) -> Path:
    """sweep.png (see `figure`)."""
    import matplotlib.pyplot as plt  # lazy: matplotlib, as in figure()

    fig = figure(store, res)
    path = Path(path)
    part = path.with_name(f".{path.name}.{os.getpid()}.png")  # a reader never sees half of it
    fig.savefig(part, dpi=100)
    plt.close(fig)
    os.replace(part, path)
    return path


def _title(res: dict[str, Any]) -> str:
    goals = res.get("metrics") or ([res["metric"]] if res["metric"] else [{"name": "metric"}])
    said = ", ".join(f"{g['name']}, goal {g.get('goal', '-')}" for g in goals)
    front = ", Pareto front" if len(goals) == 2 and "pareto_front" in res else ""
    return f"sweep {res['sweep_id']} ({res['method']}): {said}{front}"


def figure(store: SweepStore, res: dict[str, Any]):
    """The sweep's figure: titled with sweep, method, metric(s) and goal(s); with two
    objectives, first the Pareto front (every run's two values, the front stepped through its
    runs); the (first) metric against each swept parameter (log axis for log distributions, a
    categorical axis for non-numbers) and over runs in order of completion with the best-so-far
    curve and integer run ticks. The best run (or the Pareto front) is a red star, runs
    hyperband stopped are crosses, pruned runs gray triangles."""
    # lazy: matplotlib costs 0.37 s at start-up; only `show` and a sweep's end draw
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above, once Agg is chosen

    specs = store.config.get("parameters") or {}
    params = list(specs or dict.fromkeys(k for e in res["runs"] for k in e["params"]))
    goals = res.get("metrics") or [res["metric"] or {}]
    two = len(goals) == 2 and "pareto_front" in res
    name = goals[0].get("name", "metric")
    rows = [e for e in res["runs"] if e["metric"] is not None]
    panels = len(params) + 1 + two
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.8))
    axes = list(axes) if panels > 1 else [axes]
    fig.suptitle(_title(res))
    if two:
        _front(axes.pop(0), res, [g["name"] for g in goals])
    for ax, key in zip(axes, params, strict=False):
        xs = _param_axis(ax, key, specs.get(key, {}), [e["params"].get(key) for e in rows])
        _points(ax, rows, xs, res)
        ax.set_xlabel(key)
        ax.set_ylabel(name)
    _over_runs(axes[-1], store, rows, res, maximize=goals[0].get("goal") == "maximize")
    axes[-1].set_ylabel(name)
    fig.tight_layout()
    return fig


def _front(ax: Any, res: dict[str, Any], names: list[str]) -> None:
    """Objective 1 against objective 2 for every run with both; the front's runs joined."""
    rows = [e for e in res["runs"] if all(e["objectives"].get(n) is not None for n in names)]
    _points(ax, rows, [e["objectives"][names[0]] for e in rows], res, names[1])
    front = sorted(res["pareto_front"], key=lambda e: e["objectives"][names[0]])
    xs = [e["objectives"][names[0]] for e in front]
    ax.plot(xs, [e["objectives"][names[1]] for e in front], "-", color="red", lw=1, alpha=0.5)
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    if rows:
        ax.legend(fontsize="small")


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


def _points(
    ax: Any, rows: list[dict[str, Any]], xs: list[Any], res: dict[str, Any], y: str | None = None
) -> None:
    """Each run's metric (or objective `y`) at `xs`: dots, crosses for hyperband-stopped runs,
    triangles for pruned ones, a star for the best run or each run of the Pareto front."""
    best = {res["best"]["id"]} if res["best"] else set()
    best |= {e["id"] for e in res.get("pareto_front") or ()}
    ys = [e["metric"] if y is None else e["objectives"][y] for e in rows]
    marks = {
        "run": [i for i, e in enumerate(rows) if e["state"] not in ("stopped", "pruned")],
        "stopped by hyperband": [i for i, e in enumerate(rows) if e["state"] == "stopped"],
        "pruned": [i for i, e in enumerate(rows) if e["state"] == "pruned"],
        "pareto front" if "pareto_front" in res else "best": [
            i for i, e in enumerate(rows) if e["id"] in best
        ],
    }
    style = {"run": ("o", 18, None), "stopped by hyperband": ("x", 40, "gray")}
    style |= {"pruned": ("v", 30, "gray"), "best": ("*", 160, "red")}
    style["pareto front"] = style["best"]
    for label, picked in marks.items():
        if picked:
            marker, size, color = style[label]
            xy = [xs[i] for i in picked], [ys[i] for i in picked]
            ax.scatter(*xy, marker=marker, s=size, color=color, label=label)


def _over_runs(
    ax: Any, store: SweepStore, rows: list[dict[str, Any]], res: dict[str, Any], maximize: bool
) -> None:
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib, as in figure()

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
