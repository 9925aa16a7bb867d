"""The sweep engine with W&B's classic semantics (trainer.sweep.search.wandb_sweeps, a port of W&B's
`sweeps` 0.3.0): the next run and hyperband stop decisions from the store's run history, with
suggested values turned into plain Python."""

from __future__ import annotations

import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from trainer.sweep.search import space, wandb_sweeps
from trainer.sweep.store.database import RunRecord


def engine_name() -> str:
    """Which engine decides a local sweep's runs, as results.json records it."""
    try:
        release = version("compiled-trainer")
    except PackageNotFoundError:  # running from a source tree that was never installed
        release = "source"
    return f"compiled-trainer {release} (W&B sweeps 0.3.0 semantics)"


# Our store's states in the engine's vocabulary (W&B shows a stopped run as finished+stopped).
_ENGINE_STATE = {
    "running": "running",
    "finished": "finished",
    "stopped": "finished",
    "failed": "failed",
    "crashed": "crashed",
    "preempted": "preempted",  # handed out again before any new run
}


def plain(value: Any) -> Any:
    """numpy scalars/arrays (what the engine suggests) → plain Python values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def metric_value(run: RunRecord, metric: dict | None) -> float | None:
    """The run's value of the sweep metric: its last logged value, as W&B's summary holds."""
    if not metric:
        return None
    for row in reversed(run.history):
        if metric["name"] in row:
            return row[metric["name"]]
    return None


def to_sweep_run(run: RunRecord) -> wandb_sweeps.SweepRun:
    """The engine's view of a stored trial: its id, state, config and metric history."""
    return wandb_sweeps.SweepRun(
        name=run.id,
        state=_ENGINE_STATE.get(run.state, "finished"),
        config={k: {"value": v} for k, v in run.params.items()},
        history=run.history,
        summary_metrics=run.history[-1] if run.history else {},
        search_info=run.search_info,
        stopped=run.state == "stopped",
        should_stop=bool(run.stop_requested),
    )


def target_reached(config: dict, runs: list[RunRecord]) -> bool:
    """Whether any run reached `metric.target`: W&B then ends the sweep (no further runs)."""
    metric = config.get("metric") or {}
    target = metric.get("target")
    if target is None:
        return False
    maximize = metric.get("goal") == "maximize"
    for run in runs:
        value = metric_value(run, metric)
        if isinstance(value, int | float) and (value >= target if maximize else value <= target):
            return True
    return False


def next_params(
    config: dict, runs: list[RunRecord], prior: list[RunRecord] = ()
) -> tuple[dict, dict | None] | None:
    """The next parameters to try, or None when the sweep is over (grid done, run_cap, or a run
    reached metric.target). The engine hears the runs inside the space (space.told: a sweep
    extended in place keeps its runs outside the new space out of its model, and its grid
    skips the points already run) and the `prior` runs of a warm start; run_cap counts every
    run of the sweep."""
    cap = config.get("run_cap")
    if cap is not None and len(runs) >= cap:
        return None
    if target_reached(config, runs):
        return None
    heard = [to_sweep_run(r) for r in [*space.told(config, runs), *prior]]
    with warnings.catch_warnings():  # scikit-learn's GP notices are not the user's business
        warnings.filterwarnings("ignore", module="sklearn")
        warnings.filterwarnings("ignore", module="scipy")
        suggestion = wandb_sweeps.next_run(config, heard, validate=False)
    if suggestion is None:
        return None
    params = {k: plain(v["value"]) for k, v in suggestion.config.items()}
    info = plain(suggestion.search_info) if suggestion.search_info else None
    if info is not None and config.get("method") == "bayes":  # what its model was fitted on
        info["results_known"] = sum(1 for r in heard if r.state == "finished")
    return params, info


def runs_to_stop(config: dict, runs: list[RunRecord]) -> list[str]:
    """Ids of running runs that the sweep's early_terminate (hyperband) stops now."""
    if not config.get("early_terminate") or not config.get("metric"):
        return []
    active = [r for r in runs if r.state == "running" and not r.stop_requested]
    if not active:
        return []
    stop = wandb_sweeps.stop_runs(config, [to_sweep_run(r) for r in runs], validate=False)
    wanted = {r.id for r in active}
    return [s.name for s in stop if s.name in wanted]


def sweep_state(stored: str, config: dict, runs: list[RunRecord], propose: Any = None) -> str:
    """The state `ls` shows: `finished` only when an agent could get no further run from the
    sweep (the same test as the agents' claim, `propose`: next_params by default); a sweep
    whose agents ended with runs left is `stopped (3/4 runs)`, resumable with
    hydra.sweeper.sweep_id."""
    if stored not in ("finished", "stopped"):
        return stored
    live = [r for r in runs if not r.superseded]
    if any(r.state == "running" for r in live):
        return "running"
    propose = propose or (lambda r: next_params(config, r))
    if propose(live) is None and not any(r.state == "preempted" for r in live):
        return "finished"
    cap = config.get("run_cap")
    return f"stopped ({len(live)}/{cap} runs)" if cap else f"stopped ({len(live)} runs, more left)"
