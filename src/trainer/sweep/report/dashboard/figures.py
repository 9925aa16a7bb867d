"""The dashboard's charts as Plotly figures, built from a sweep's view (snapshot.view): every
run's metric per epoch, parallel coordinates, parameter importance, the Pareto front of two
objectives, compile time against steady step time, and a PBT sweep's schedule. Each title says
what it plots."""

from __future__ import annotations

import json
import math
from typing import Any

import plotly.graph_objects as go
from plotly.utils import PlotlyJSONEncoder

# How a run's curve ends and is drawn, by state: stopped and pruned runs stand out.
LINE = {"finished": "solid", "running": "dot", "stopped": "dash", "pruned": "dash"}
END = {"finished": "circle", "running": "circle-open", "stopped": "x", "pruned": "triangle-down"}
STATES = (
    "dashed, ending in x: stopped early (hyperband); ending in a triangle: pruned; dotted: running"
)


def _layout(title: str, subtitle: str | None = None, **extra: Any) -> dict[str, Any]:
    """Every chart's layout: its title (and what to read from it), kept zoom across updates."""
    heading: dict[str, Any] = {"text": title, "x": 0.01, "xanchor": "left"}
    if subtitle:
        heading["subtitle"] = {"text": subtitle}
    return {
        "title": heading,
        "template": "plotly_white",
        "uirevision": "keep",  # Plotly.react keeps the user's zoom and selections
        "margin": {"l": 60, "r": 30, "t": 80, "b": 50},
        "height": 420,
        **extra,
    }


def _empty(title: str, message: str) -> go.Figure:
    """A titled chart with nothing to plot yet, saying why."""
    return go.Figure(
        layout=_layout(
            title,
            xaxis={"visible": False},
            yaxis={"visible": False},
            annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}],
        )
    )


def _goal(view: dict[str, Any]) -> dict[str, Any] | None:
    return view["objectives"][0] if view["objectives"] else None


def curves(view: dict[str, Any]) -> go.Figure:
    """The first objective per epoch, one line per run, drawn by the run's state."""
    goal = _goal(view)
    name = goal["name"] if goal else "metric"
    title = f"{name} per epoch, every run"
    runs = [r for r in view["runs"] if r["curves"].get(name)]
    if not runs:
        return _empty(title, f"no run has logged {name} yet")
    last = max(max(r["curves"]["epoch"]) for r in runs)
    axis = {"title": {"text": "epoch"}, **({"dtick": 1} if last <= 20 else {})}  # whole epochs
    fig = go.Figure(layout=_layout(title, STATES, xaxis=axis))
    for r in runs:
        ys = r["curves"][name]
        end = END.get(r["state"], "square")
        fig.add_trace(
            go.Scatter(
                x=r["curves"]["epoch"],
                y=ys,
                mode="lines+markers",
                name=f"{r['id']} ({r['state']})",
                line={"dash": LINE.get(r["state"], "dashdot")},
                marker={
                    "symbol": ["circle"] * (len(ys) - 1) + [end],
                    "size": [5] * (len(ys) - 1) + [10],
                },
                hovertemplate=f"{r['id']}<br>epoch %{{x}}<br>{name} %{{y:.4g}}<extra>{r['state']}</extra>",
            )
        )
    fig.update_yaxes(title_text=name)
    return fig


def _dimension(parameter: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    """One parallel axis: numbers as they are (log10 for a log-scale parameter), anything
    else as categories."""
    name = parameter["name"]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numbers and parameter["log"] and all(v > 0 for v in values):
        return {"label": f"{name} (log10)", "values": [math.log10(v) for v in values]}
    if numbers:
        return {"label": name, "values": values}
    choices = sorted({json.dumps(v) if not isinstance(v, str) else v for v in values})
    index = {c: i for i, c in enumerate(choices)}
    texts = [json.dumps(v) if not isinstance(v, str) else v for v in values]
    return {
        "label": name,
        "values": [index[t] for t in texts],
        "tickvals": list(range(len(choices))),
        "ticktext": choices,
    }


def parallel_coordinates(view: dict[str, Any]) -> go.Figure:
    """Each run with a metric as a line through its parameters and the metric (its color,
    brighter is better)."""
    goal = _goal(view)
    name = goal["name"] if goal else "metric"
    title = f"Parallel coordinates: the parameters of each run and its {name}"
    runs = [r for r in view["runs"] if r["metric"] is not None]
    if not runs:
        return _empty(title, f"no run has reported {name} yet")
    dims = [_dimension(p, [r["params"].get(p["name"]) for r in runs]) for p in view["parameters"]]
    metric = [r["metric"] for r in runs]
    dims.append({"label": name, "values": metric})
    line = {
        "color": metric,
        "colorscale": "Viridis",
        "reversescale": goal is not None and goal.get("goal") != "maximize",
        "showscale": True,
        "colorbar": {"title": {"text": name}},
    }
    subtitle = f"one line per run ({len(runs)}); drag along an axis to select a range"
    fig = go.Figure(go.Parcoords(dimensions=dims, line=line), layout=_layout(title, subtitle))
    fig.update_layout(margin={"l": 80, "r": 60, "t": 130, "b": 40})
    return fig


def importance(view: dict[str, Any]) -> go.Figure:
    """Optuna's importance of each parameter, one bar per parameter and objective."""
    found = view["importance"]
    names = ", ".join(g["name"] for g in view["objectives"]) or "the metric"
    title = f"Parameter importance for {names}"
    if found["reason"]:
        return _empty(title, found["reason"])
    subtitle = f"Optuna's {found['evaluator']} evaluator over {found['runs']} finished runs"
    fig = go.Figure(layout=_layout(title, subtitle, barmode="group"))
    first = next(iter(found["objectives"].values()))
    order = sorted(first, key=first.get)  # the most important at the top
    for objective, values in found["objectives"].items():
        fig.add_trace(
            go.Bar(
                x=[values.get(p, 0.0) for p in order],
                y=order,
                orientation="h",
                name=objective,
                hovertemplate="%{y}: %{x:.3f}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="importance (sums to 1 per objective)", rangemode="tozero")
    return fig


def pareto_front(view: dict[str, Any]) -> go.Figure | None:
    """With two objectives: every finished run's two values, the Pareto front joined."""
    if len(view["objectives"]) != 2:
        return None
    (a, b) = view["objectives"]
    title = f"Pareto front of {a['name']} ({a.get('goal', 'minimize')}) and {b['name']} ({b.get('goal', 'minimize')})"
    runs = [
        r
        for r in view["runs"]
        if r["state"] == "finished"
        and None not in (r["objectives"].get(a["name"]), r["objectives"].get(b["name"]))
    ]
    if not runs:
        return _empty(title, "no finished run has both objectives yet")
    front = sorted((r for r in runs if r["pareto"]), key=lambda r: r["objectives"][a["name"]])
    layout = _layout(
        title,
        f"finished runs; the front ({len(front)}) joined in red",
        xaxis={"title": {"text": a["name"]}},
        yaxis={"title": {"text": b["name"]}},
    )
    fig = go.Figure(layout=layout)
    for label, group, style in (
        ("run", runs, {"mode": "markers", "marker": {"color": "#888", "size": 8}}),
        (
            "Pareto front",
            front,
            {"mode": "lines+markers", "marker": {"color": "#d62728", "size": 11}},
        ),
    ):
        fig.add_trace(
            go.Scatter(
                x=[r["objectives"][a["name"]] for r in group],
                y=[r["objectives"][b["name"]] for r in group],
                text=[r["id"] for r in group],
                name=label,
                hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>",
                **style,
            )
        )
    return fig


def compile_cost(view: dict[str, Any]) -> go.Figure:
    """Each run's compile seconds against its steady step milliseconds, compiled and eager."""
    title = "Compile cost per run: compile time (s) against steady step time (ms)"
    subtitle = "compiling pays when faster steps win its seconds back over the run"
    points = []
    for r in view["runs"]:
        cost = (
            r["compile_s"]
            if r["compile_s"] is not None
            else (0.0 if r["compiled"] is False else None)
        )
        if r["step_ms"] is not None and cost is not None:
            points.append((r, cost))
    if not points:
        return _empty(title, "no run has finished an epoch yet")
    fig = go.Figure(
        layout=_layout(
            title,
            subtitle,
            xaxis={"title": {"text": "steady step time (ms)"}},
            yaxis={"title": {"text": "compile time (s)"}, "rangemode": "tozero"},
            showlegend=True,  # compiled or eager, also when every run is one of them
        )
    )
    kinds = (("compiled", True), ("eager", False), ("running (not summed up yet)", None))
    for label, compiled in kinds:
        group = [(r, c) for r, c in points if r["compiled"] is compiled]
        if group:
            fig.add_trace(
                go.Scatter(
                    x=[r["step_ms"] for r, _ in group],
                    y=[c for _, c in group],
                    text=[r["id"] for r, _ in group],
                    mode="markers+text",
                    textposition="top center",
                    name=label,
                    marker={"size": 10},
                    hovertemplate="%{text}<br>step %{x:.3g} ms<br>compile %{y:.3g} s<extra></extra>",
                )
            )
    return fig


def pbt_schedule(view: dict[str, Any]) -> go.Figure | None:
    """method pbt: each member's value of the first explored parameter by epoch (a step line),
    a diamond where it copied a leader; None for other methods."""
    if view["method"] != "pbt":
        return None
    name = view["parameters"][0]["name"] if view["parameters"] else None
    title = f"PBT schedule: {name} of each member by epoch (◆ a copy of a leader)"
    members = [r for r in view["runs"] if r["lineage"]]
    if name is None or not members:
        return _empty(title, "no member has started yet")
    log = view["parameters"][0]["log"]
    fig = go.Figure(
        layout=_layout(
            title,
            "hover a diamond for the leader it copied",
            xaxis={"title": {"text": "epoch"}, "dtick": 1},
            yaxis={"title": {"text": name}, "type": "log" if log else "linear"},
        )
    )
    for r in members:
        steps = r["lineage"]
        fig.add_trace(
            go.Scatter(
                x=[s["epoch"] for s in steps],
                y=[s["params"].get(name) for s in steps],
                text=[f"copied {s['copied_from']}" if s["copied_from"] else "kept" for s in steps],
                mode="lines+markers",
                line={"shape": "hv", "width": 3 if r["id"] == view["best"] else 1.5},
                marker={
                    "symbol": ["diamond" if s["copied_from"] else "circle" for s in steps],
                    "size": [11 if s["copied_from"] else 5 for s in steps],
                },
                name=r["id"],
                hovertemplate=f"{r['id']}<br>epoch %{{x}}<br>{name} %{{y:.4g}}<br>%{{text}}"
                "<extra></extra>",
            )
        )
    return fig


def figures(view: dict[str, Any]) -> dict[str, go.Figure]:
    """The page's charts in its order (the Pareto front only with two objectives)."""
    charts = {
        "curves": curves(view),
        "parallel": parallel_coordinates(view),
        "importance": importance(view),
        "pareto": pareto_front(view),
        "compile": compile_cost(view),
        "pbt": pbt_schedule(view),
    }
    return {key: fig for key, fig in charts.items() if fig is not None}


def page_json(view: dict[str, Any]) -> str:
    """What the page polls: the sweep's view and its figures (Plotly's JSON)."""
    charts = {key: fig.to_plotly_json() for key, fig in figures(view).items()}
    return json.dumps({"sweep": view, "figures": charts}, cls=PlotlyJSONEncoder)
