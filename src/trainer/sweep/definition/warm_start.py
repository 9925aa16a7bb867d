"""hydra.sweeper.warm_start=SWEEP[,SWEEP...]: a new sweep's engine is told the finished runs of
earlier sweeps whose parameters lie in its space, as W&B's `prior_runs`. Each earlier sweep is a
local id or directory, or one in hydra.sweeper.storage's database; one ranked by another metric,
or that trained another model or data set, is refused with the reason before anything runs.
bayes, Optuna and Ax use the runs; grid and random ignore them (a note says so)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from trainer.errors import TrainerError
from trainer.sweep.definition.command import fixed_overrides
from trainer.sweep.search import space
from trainer.sweep.search.classic import metric_value
from trainer.sweep.search.custom_method import drives_optimizer
from trainer.sweep.search.pbt_policy import is_pbt
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import UnknownSweep, find
from trainer.sweep.store.opening import open_reader, sweep_ids
from trainer.sweep.store.storage import Storage, shown

KEY = "hydra.sweeper.warm_start"
IDENTITY = ("model", "data")  # config groups whose choice makes runs of another task


class WarmStartError(TrainerError):
    """An earlier sweep that cannot seed this one (unknown, another metric, model or data):
    one paragraph, exit 2, before anything runs."""


@dataclass(frozen=True)
class WarmStart:
    """What the new sweep's engine is told: the earlier sweeps' ids and their finished runs
    inside its space ({id: <sweep>/<run>, params, history of the metric's values})."""

    sweeps: list[str]
    prior_runs: list[dict[str, Any]]
    considered: int  # the earlier sweeps' finished runs with the metric, inside or not

    def record(self, store: SweepStore) -> None:
        """Kept in the new sweep's store: every agent's engine reads it (space.prior_runs)."""
        store.set(space.WARM_KEY, {"sweeps": self.sweeps, "prior_runs": self.prior_runs})

    def said(self) -> str:
        return (
            f"warm start: {len(self.prior_runs)} finished run(s) of sweep(s) "
            f"{', '.join(self.sweeps)} lie in this sweep's space (of {self.considered} with "
            "its metric); its engine is told them before its first suggestion"
        )


def sweep_names(value: Any) -> list[str]:
    """The earlier sweeps of hydra.sweeper.warm_start: `a,b`, a list, or one id or path."""
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names = [str(item).strip() for item in items if str(item).strip()]
    if not names:
        raise WarmStartError(
            f"{KEY}={value!r} names no sweep: give one or more sweep ids or directories, "
            f"e.g. {KEY}=abc123de,fgh456ij (python -m trainer.sweep ls lists them)"
        )
    return names


def fixed_values(config: dict[str, Any]) -> dict[str, Any]:
    """The keys and config groups a sweep's `command` sets for every trial, with their values
    as Hydra parses them (`model=small_cnn` -> {"model": "small_cnn"})."""
    found = {}
    for line in fixed_overrides(config):
        if line.startswith("-"):
            continue
        try:
            override = OverridesParser.create().parse_override(line)
        except OverrideParseException:
            continue  # the sweep command checked it when the sweep was made
        if not override.is_sweep_override() and not override.is_delete():
            found[override.key_or_group] = override.value()
    return found


def ignored_note(config: dict[str, Any]) -> str | None:
    """Why this sweep's engine takes no earlier runs (grid, random, pbt), or None."""
    method = config.get("method")
    if drives_optimizer(config) or (method == "bayes" and not is_pbt(config)):
        return None
    what = "pbt" if is_pbt(config) else method
    return (
        f"{KEY}: method {what} learns nothing from earlier runs (only bayes and the Optuna or "
        "Ax schedulers do); ignored, no prior run is told"
    )


def _open(name: str, root: Path, storage: str | None) -> SweepStore:
    """An earlier sweep's store, read only: a local id or directory, else one in `storage`."""
    try:
        return open_reader(find(KEY, name, root).root)
    except UnknownSweep:
        if storage is None or Storage.server(storage, None).is_sqlite:
            raise
    names = sweep_ids(storage)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise WarmStartError(
            f"{KEY}={name}: no local sweep {name!r} (id or directory) and none in "
            f"{shown(storage)} ({hint}its sweeps: {', '.join(names) or 'none'}); list them with "
            "python -m trainer.sweep ls [--storage URL] and give a sweep id from there."
        )
    return SweepStore(storage=Storage.server(storage, name), read_only=True)


def _same_task(name: str, earlier: dict[str, Any], config: dict[str, Any]) -> None:
    """Refuse an earlier sweep ranked by another metric, or of another model or data set."""
    metric, theirs = config.get("metric") or {}, earlier.get("metric") or {}
    if metric.get("name") != theirs.get("name") or (
        metric.get("goal", "minimize") != theirs.get("goal", "minimize")
    ):
        raise WarmStartError(
            f"{KEY}={name}: sweep {name} ranked its runs by {theirs or 'no metric'}, this sweep "
            f"by {metric or 'no metric'}: its results would teach the engine another objective. "
            f"Warm start only from sweeps of the same metric and goal, or drop {KEY}."
        )
    ours, before = fixed_values(config), fixed_values(earlier)
    searched = set(config.get("parameters") or {}) | set(earlier.get("parameters") or {})
    for group in IDENTITY:
        if group not in searched and ours.get(group) != before.get(group):
            raise WarmStartError(
                f"{KEY}={name}: sweep {name} trained {group}={before.get(group) or '(default)'}, "
                f"this sweep trains {group}={ours.get(group) or '(default)'}: its runs say "
                f"nothing about these. Warm start only from sweeps of the same {group}, or drop "
                f"{KEY}."
            )


def _runs(name: str, store: SweepStore, config: dict[str, Any]) -> tuple[list[dict], int]:
    """The earlier sweep's finished runs inside this sweep's space (each completed with the
    earlier sweep's fixed values of the keys this one searches), and how many had the metric."""
    earlier, metric = store.config, config.get("metric")
    fixed_then, fixed_now = fixed_values(earlier), fixed_values(config)
    searched = set(config.get("parameters") or {})
    kept, considered = [], 0
    for run in store.runs():
        if run.state != "finished" or run.superseded or metric_value(run, metric) is None:
            continue
        considered += 1
        params = space.completed(earlier, run.params)
        params = {**{k: v for k, v in fixed_then.items() if k in searched}, **params}
        if space.outside(config, params, fixed_now):
            continue
        metric_name = metric["name"]
        history = [{metric_name: row[metric_name]} for row in run.history if metric_name in row]
        kept.append({"id": f"{name}/{run.id}", "params": params, "history": history})
    return kept, considered


def gather(
    value: Any, config: dict[str, Any], root: str | Path, storage: str | None
) -> WarmStart | None:
    """The warm start of hydra.sweeper.warm_start=`value` for the sweep `config`: None when
    unset or ignored by its method (a note printed); WarmStartError for an unknown sweep or one
    of another metric, model or data set."""
    names = sweep_names(value)
    if not names:
        return None
    note = ignored_note(config)
    if note is not None:
        print(f"sweep: note: {note}", flush=True)
        return None
    if not (config.get("metric") or {}).get("name"):
        raise WarmStartError(
            f"{KEY}: this sweep has no metric (hydra.sweeper.metric.name), so earlier runs "
            "have nothing to tell its engine; set the metric, or drop the warm start."
        )
    sweeps, runs, considered = [], [], 0
    for name in names:
        store = _open(name, Path(root), storage)
        try:
            sweep_id = store.get("sweep_id") or Path(name).name
            _same_task(name, store.config, config)
            found, seen = _runs(sweep_id, store, config)
        finally:
            store.close()
        sweeps.append(sweep_id)
        runs += found
        considered += seen
    return WarmStart(sweeps, runs, considered)
