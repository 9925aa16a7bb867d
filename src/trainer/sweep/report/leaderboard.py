"""What a local sweep produced: the leaderboard table, results.json, best.yaml (sweep.png: see
report_plot); multi-objective sweeps rank and mark their Pareto front."""

from __future__ import annotations

import json
import math
import shlex
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from trainer.outputs.layout import write_text_atomic
from trainer.sweep.definition.command import fixed_overrides
from trainer.sweep.report import pareto
from trainer.sweep.report.plot import figure as figure
from trainer.sweep.report.plot import plot as plot
from trainer.sweep.search import classic, dispatch, pbt_policy, space
from trainer.sweep.search import repeats as repeating
from trainer.sweep.store import steering
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.directory import SweepLayout
from trainer.trial.pbt_files import lineage_of
from trainer.trial.trial_argv import hydra_value


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


def _entry(r: RunRecord, goals: list[dict[str, Any]], multi: bool) -> dict[str, Any]:
    values = [classic.metric_value(r, goal) for goal in goals]
    entry = {
        "id": r.id,
        "state": r.state,
        "params": r.params,
        "metric": values[0] if values else None,
        "run_dir": r.run_dir,
        "exit_code": r.exit_code,
        "reason": failure_reason(r.log_tail) if r.state in ("failed", "crashed") else None,
        "devices": r.devices or [],
        "log": r.log_path,
        "duration_s": r.duration_s,
        "epochs": len(r.history),
        "preemptions": r.preemptions,  # stopped by the cluster with a checkpoint
        "losses": r.losses,  # lost with its agent, job or host
        "retries": r.preemptions + r.losses,  # handed out again after either
        # a failed run whose loss stopped being finite (its summary says so): shown "diverged"
        "diverged": r.state == "failed" and (r.summary or {}).get("status") == "diverged",
        **_compile_info(r.summary),
    }
    if multi:
        entry["objectives"] = {goal["name"]: v for goal, v in zip(goals, values, strict=True)}
    return entry


def _revisions_and_warm_start(store: SweepStore) -> dict[str, Any]:
    """An extended sweep's revisions (each one's number, when, by whom, what changed, the runs
    before it and its file) and a warm start's earlier sweeps with the runs used; {} if none."""
    found: dict[str, Any] = {}
    revisions = store.get(space.REVISIONS_KEY)
    if revisions:
        last = revisions[-1]["revision"]
        found["revisions"] = [
            {
                **{k: v for k, v in r.items() if k != "config"},
                "file": (
                    SweepLayout("").yaml
                    if r["revision"] == last
                    else SweepLayout("").revision(r["revision"])
                ).name,
            }
            for r in revisions
        ]
    warm = store.get(space.WARM_KEY)
    if warm:
        found["warm_start"] = {
            "sweeps": warm["sweeps"],
            "prior_runs": len(space.prior_runs(store, store.config)),
        }
    return found


def results(
    store: SweepStore, sweep_id: str, records: list[RunRecord] | None = None
) -> dict[str, Any]:
    """The results dict (also results.json): every run, ranked by the sweep metric; with
    multi-objective `metrics`, the Pareto front (finished runs) first, marked `pareto`.
    `records`: the store's runs when the caller read them already (one snapshot)."""
    config = store.config
    metric, goals = config.get("metric"), pareto.objectives(config)
    multi = isinstance(config.get("metrics"), list)
    records = store.runs() if records is None else records
    runs = [_entry(r, goals, multi) for r in records if not r.superseded]
    steered, change = store.lifecycle()
    res: dict[str, Any] = {
        "sweep_id": sweep_id,
        "backend": "local",
        "engine": dispatch.engine_name(config),  # which code decided the runs
        "method": config.get("method"),
        "metric": metric,
        # its owner's pause, stop or cancel stands; else as its agents left it
        "state": steered if steered in steering.HALTED else store.get("state", "created"),
        "state_changed": change.to_dict() if change else None,  # {state, verb, by, at}
        **_revisions_and_warm_start(store),
    }
    if multi:
        finished = {
            e["id"]: list(e["objectives"].values()) for e in runs if e["state"] == "finished"
        }
        on_front = set(pareto.front(finished, goals))
        rank = _rank_key(goals[0] if goals else None)
        for e in runs:
            e["pareto"] = e["id"] in on_front
        runs.sort(key=lambda e: (not e["pareto"], *rank(e)))
        res["metrics"] = goals
        res["pareto_front"] = [e for e in runs if e["pareto"]]
        return {**res, "runs": runs, "best": None}
    if pbt_policy.is_pbt(config):  # each member's schedule: what it copied and explored
        res.update(method="pbt", pbt=pbt_policy.settings_of(config))
        folder = store.get(pbt_policy.FOLDER_KEY)  # every machine's members report there
        for e in runs:
            e["lineage"] = lineage_of(folder, e["id"])
    runs.sort(key=_rank_key(metric))
    ranked = [e for e in runs if e["metric"] is not None and e["state"] in ("finished", "stopped")]
    repeats = repeating.Repeats.of_store(store)
    if repeats is not None:
        return {**res, "runs": runs, **by_configuration(records, repeats, metric)}
    return {**res, "runs": runs, "best": ranked[0] if ranked else None}


def by_configuration(
    records: list[RunRecord], repeats: repeating.Repeats, metric: dict | None
) -> dict[str, Any]:
    """hydra.sweeper.repeats: the configurations ranked by the mean of the metric over their
    seeds (each with std, n, its runs and seeds); the best is the best configuration by mean."""
    groups = repeating.configurations(records)
    configs = repeating.summary(groups, metric)
    configs.sort(key=_rank_key(metric))
    best = next((c for c in configs if c["metric"] is not None), None)
    counts = {"count": repeats.count, "seeds": list(repeats.seeds)}
    return {"repeats": counts, "configurations": configs, "best": best}


def best_overrides(config: dict, best: dict | None) -> list[str]:
    """The arguments of `python -m trainer` that reproduce the best run: the trials' fixed
    arguments (the user's config dir and name, fixed overrides) + its parameters."""
    if best is None:
        return []

    params = [f"{key}={hydra_value(value)}" for key, value in best["params"].items()]
    return [*fixed_overrides(config), *params]


def _best_text(config: dict, sweep_id: str, res: dict[str, Any]) -> str:
    """best.yaml: the overrides of the best run (its command on the first line, quoted for a
    shell), or with `metrics` those of every Pareto-optimal run, keyed by run id (one command
    line each)."""
    front = res.get("pareto_front")
    if front is None:
        overrides = best_overrides(config, res["best"])
        if not overrides:
            return f"# Sweep {sweep_id} has no finished run with a metric yet.\n"
        what = "run" if "repeats" not in res else "configuration (by the mean over its seeds)"
        header = f"# Best {what} of sweep {sweep_id}: python -m trainer " + shlex.join(overrides)
        if res.get("pbt"):
            header += (
                "\n# method pbt: these are its starting values; its values changed at each "
                "interval (its lineage in results.json, and the leaderboard's schedule)"
            )
        return header + "\n" + yaml.safe_dump(overrides, sort_keys=False)
    if not front:
        return f"# Sweep {sweep_id} has no finished run with every objective yet.\n"
    names = ", ".join(m["name"] for m in res["metrics"])
    doc = {e["id"]: best_overrides(config, e) for e in front}
    lines = [f"# The {len(front)} Pareto-optimal run(s) of sweep {sweep_id} ({names}):"]
    lines += [f"# {key}: python -m trainer " + shlex.join(ov) for key, ov in doc.items()]
    return "\n".join(lines) + "\n" + yaml.safe_dump(doc, sort_keys=False)


def write_final(store: SweepStore, sweep_id: str, layout: SweepLayout) -> dict[str, Any]:
    """results.json and best.yaml, and sweep.png once no run of the sweep runs or waits to
    resume: whoever ends last (an agent of any job or machine, or the sweep command) leaves the
    sweep's whole report, even after the command that started it is gone."""
    res = write(store, sweep_id, layout)
    if any(r["state"] in ("running", "preempted") for r in res["runs"]):
        return res
    if store.get("state") == "running" and dispatch.sweep_state("finished", store) == "finished":
        store.set("state", "finished")  # by its last agent: the command may be gone
    ended = max((r.ended_at or 0.0 for r in store.runs()), default=0.0)
    drawn = layout.plot.stat().st_mtime if layout.plot.is_file() else -1.0
    if drawn < ended or drawn < 0:  # not drawn since the last run ended (by another agent)
        plot(store, res, layout.plot)
    return res


def write(store: SweepStore, sweep_id: str, layout: SweepLayout) -> dict[str, Any]:
    """Write results.json and best.yaml into the sweep directory (atomically: several agents
    refresh them); return the results."""
    res = results(store, sweep_id)
    write_text_atomic(layout.results, json.dumps(res, indent=2, default=str))
    write_text_atomic(layout.best, _best_text(store.config, sweep_id, res))
    return res


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cache_counts(entry: dict[str, Any]) -> tuple[int, int] | None:
    """(hits, misses) of the compile caches (FX graph, AOTAutograd) in one run; None if eager."""
    if not entry.get("compiled"):
        return None

    def total(kind: str) -> int:
        return int(sum(v for k, v in entry.items() if kind in k and isinstance(v, int | float)))

    return total("cache_hit"), total("cache_miss")


def _cache_hits(entry: dict[str, Any]) -> str:
    """'hits/misses' of the compile caches in one run; '-' if eager."""
    counts = cache_counts(entry)
    return "-" if counts is None else f"{counts[0]}/{counts[1]}"


def _params(entry: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in entry["params"].items())


def _metric_cells(res: dict[str, Any], e: dict[str, Any]) -> list[str]:
    """The metric cell(s) of a run: one per objective, and the Pareto mark, with `metrics`."""
    if "pareto_front" not in res:
        return ["-" if e["metric"] is None else _fmt(e["metric"])]
    values = ["-" if v is None else _fmt(v) for v in e["objectives"].values()]
    return [*values, "*" if e["pareto"] else ""]


@dataclass(frozen=True)
class Column:
    """One leaderboard column: its header, the cell of run `e` ranked `i`, and its priority: 0
    is always shown (run ids, objectives, states); a narrow terminal leaves out the highest
    numbers first. A new column is one more entry in `columns`."""

    header: str
    cell: Callable[[int, dict[str, Any]], str]
    priority: int = 0


def _duration(e: dict[str, Any]) -> str:
    return "-" if e.get("duration_s") is None else f"{e['duration_s']:.1f}s"


def _states(c: dict[str, Any]) -> str:
    """A configuration's repeats by state: `3 finished`, `2 finished 1 running`."""
    counts: dict[str, int] = {}
    for state in c["states"]:
        counts[state] = counts.get(state, 0) + 1
    return " ".join(f"{n} {state}" for state, n in counts.items())


def configuration_columns(res: dict[str, Any]) -> list[Column]:
    """The columns of a leaderboard of configurations (hydra.sweeper.repeats): rank, the first
    repeat's run id, mean, std and n of the metric, the repeats' states, their seeds."""
    name = (res["metric"] or {}).get("name", "metric")
    num = lambda v: "-" if v is None else _fmt(v)  # noqa: E731
    return [
        Column("rank", lambda i, c: str(i)),
        Column("config", lambda i, c: c["id"]),
        Column(f"{name} mean", lambda i, c: num(c["metric"])),
        Column("± std", lambda i, c: num(c["std"])),
        Column("n", lambda i, c: str(c["n"])),
        Column("runs", _states_cell, 1),
        Column("seeds", lambda i, c: ",".join(str(s) for s in c["seeds"]), 2),
    ]


def _states_cell(i: int, c: dict[str, Any]) -> str:
    return _states(c)


def _rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaderboard's rows: the configurations with hydra.sweeper.repeats, else the runs."""
    return res["configurations"] if "configurations" in res else res["runs"]


def columns(res: dict[str, Any]) -> list[Column]:
    """The leaderboard's columns in order: rank, run, metric (each objective and a Pareto mark
    for a multi-objective sweep), state, duration, compile time, GPUs (when any run had one),
    retries (when any run was handed out again), cache hits; with repeats, those of
    `configuration_columns`."""
    if "configurations" in res:
        return configuration_columns(res)
    names = [(res["metric"] or {}).get("name", "metric")]
    if "pareto_front" in res:
        names = [*(m["name"] for m in res["metrics"]), "pareto"]
    cols = [Column("rank", lambda i, e: str(i)), Column("run", lambda i, e: e["id"])]
    cols += [
        Column(name, lambda i, e, k=k: _metric_cells(res, e)[k], 1 if name == "pareto" else 0)
        for k, name in enumerate(names)
    ]
    cols += [
        Column("state", lambda i, e: "diverged" if e.get("diverged") else e["state"]),
        Column("time", lambda i, e: _duration(e), 2),
        Column(
            "compile_s",
            lambda i, e: "-" if e.get("compile_s") is None else f"{e['compile_s']:.2f}",
            4,
        ),
    ]
    if any(e.get("devices") for e in res["runs"]):
        cols.append(Column("gpu", lambda i, e: ",".join(e.get("devices") or ()) or "-", 3))
    if any(e.get("retries") for e in res["runs"]):  # handed out again: preempted or lost
        cols.append(Column("retries", lambda i, e: str(e.get("retries") or 0), 3))
    return [*cols, Column("cache hit/miss", lambda i, e: _cache_hits(e), 5)]


def leaderboard(
    res: dict[str, Any], *, with_params: bool, shown: list[Column] | None = None
) -> Table:
    """The leaderboard table of the `shown` columns (all by default); the parameters as a last
    column when `with_params`."""
    table = Table(title=f"sweep {res['sweep_id']} ({res.get('method')})")
    shown = columns(res) if shown is None else shown
    for col in shown:
        table.add_column(col.header, no_wrap=True)
    if with_params:
        table.add_column("params", overflow="fold")
    for i, e in enumerate(_rows(res), start=1):
        table.add_row(*(col.cell(i, e) for col in shown), *([_params(e)] * with_params))
    return table


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _print_retries(console: Console, e: dict[str, Any]) -> None:
    """How often the cluster took the run back (preempted with a checkpoint, or lost with its
    agent, job or host), and whether it resumed."""
    if e["state"] == "preempted":
        resumed = "to resume"
    elif e["state"] == "crashed" and e.get("losses"):
        resumed = "not resumed again (hydra.sweeper.max_retries)"
    else:
        resumed = "resumed from its checkpoint"
    if e.get("preemptions"):
        console.print(f"preempted: {e['id']} {_times(e['preemptions'])}, {resumed}")
    if e.get("losses"):
        console.print(
            f"lost: {e['id']} {_times(e['losses'])} (its agent, job or host gone), {resumed}"
        )


def _fitting(res: dict[str, Any], console: Console) -> tuple[Table, list[Column], bool]:
    """The widest table that fits the console: every column and the parameters; else without
    the parameters, leaving out columns by priority until it fits. The table, the columns left
    out, and whether the parameters are in it."""
    unbounded = console.options.update_width(10_000)  # the table's natural width, unwrapped

    def fits(table: Table) -> bool:
        return Measurement.get(console, unbounded, table).maximum <= console.width

    table = leaderboard(res, with_params=True)
    if fits(table):
        return table, [], True
    shown, dropped = columns(res), []
    table = leaderboard(res, with_params=False, shown=shown)
    while not fits(table) and any(c.priority for c in shown):
        worst = max(reversed(shown), key=lambda c: c.priority)  # the last of the lowest
        shown.remove(worst)
        dropped.insert(0, worst)
        table = leaderboard(res, with_params=False, shown=shown)
    return table, dropped, False


def print_leaderboard(res: dict[str, Any], console: Console | None = None) -> None:
    """The leaderboard on the console. The parameters share the table when they fit its width
    unbroken; otherwise (a narrow terminal, a log file: 80 columns) each run's parameters follow
    the table on their own line, so no column is squeezed to a few characters, and columns are
    left out by priority until run ids, objectives and states fit whole."""
    console = console or Console()
    table, dropped, fits = _fitting(res, console)
    console.print(table)
    if dropped:
        left_out = ", ".join(c.header for c in dropped)
        console.print(f"(not shown at {console.width} columns: {left_out})")
    if not fits and _rows(res):
        console.print("parameters:")
        for i, e in enumerate(_rows(res), start=1):
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
    for e in res["runs"]:
        _print_retries(console, e)
    change = steering.Change.of(res.get("state_changed"))
    if change is not None:  # its owner steered it: how and when
        console.print(f"sweep {res['sweep_id']}: {change.said()}", highlight=False)
    metric = res["metric"] or {}
    if "repeats" in res:
        return _print_repeats_end(res, console)
    if res["best"]:
        console.print(
            f"best: {res['best']['id']}  {metric.get('name')}={_fmt(res['best']['metric'])}"
        )
    if res.get("pbt") and res["best"]:
        _print_schedule(console, res)
    for e in res.get("pareto_front") or ():
        values = "  ".join(f"{k}={_fmt(v)}" for k, v in e["objectives"].items())
        console.print(f"pareto: {e['id']}  {values}")


def _print_schedule(console: Console, res: dict[str, Any]) -> None:
    """PBT: how many members copied a leader, and the best member's values epoch by epoch."""
    copies = sum(1 for e in res["runs"] for s in e.get("lineage") or () if s["copied_from"])
    console.print(
        f"pbt: {len(res['runs'])} members, {copies} copies of a leader; schedule of "
        f"{res['best']['id']}:",
        highlight=False,
    )
    for step in res["best"].get("lineage") or ():
        values = " ".join(f"{k}={_fmt(v)}" for k, v in step["params"].items())
        source = f"  (copied {step['copied_from']})" if step["copied_from"] else ""
        console.print(f"  epoch {step['epoch']:>3}  {values}{source}", highlight=False)


def _print_repeats_end(res: dict[str, Any], console: Console) -> None:
    """How configurations are ranked with hydra.sweeper.repeats, and the best one."""
    name = (res["metric"] or {}).get("name")
    seeds = ",".join(str(s) for s in res["repeats"]["seeds"])
    console.print(
        f"configurations ranked by mean ± std of {name} over {res['repeats']['count']} seeds "
        f"(trainer.seed={seeds}); every run: results.json",
        highlight=False,
    )
    best = res["best"]
    if best:
        console.print(
            f"best: {best['id']}  {name}={_fmt(best['metric'])} ± {_fmt(best['std'])} "
            f"(n={best['n']})",
            highlight=False,
        )
