"""Which parameters matter: Optuna's fANOVA evaluator (`optuna.importance`) over a sweep's
finished runs, given to it as an in-memory study built with `optuna.trial.create_trial`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import create_trial

MIN_RUNS = 3  # fewer finished runs say nothing about importance
EVALUATOR = "fANOVA"  # optuna.importance's default evaluator, seeded here for a stable chart


def _choice(value: Any) -> Any:
    """A value Optuna's CategoricalDistribution accepts (lists and mappings as JSON text)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def distribution(values: list[Any], log: bool):
    """Optuna's distribution spanning the values the runs took (None: one value only, which
    explains nothing): int or float ranges (log when the sweep draws it so), else categories."""
    choices = sorted({_choice(v) for v in values}, key=repr)
    if len(choices) < 2:
        return None
    if all(_number(v) for v in values):
        low, high = min(values), max(values)
        if all(isinstance(v, int) for v in values):
            return IntDistribution(low, high)
        return FloatDistribution(float(low), float(high), log=log and low > 0)
    return CategoricalDistribution(choices)


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna announces every study it creates on the terminal: not the dashboard's."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def _study(rows: list[dict], params: dict[str, Any], objective: dict[str, Any]):
    """An in-memory study of the runs: one complete trial per run, valued by `objective`."""
    direction = "maximize" if objective.get("goal") == "maximize" else "minimize"
    study = optuna.create_study(direction=direction)
    for row in rows:
        values = {name: _choice(row["params"][name]) for name in params}
        study.add_trial(
            create_trial(params=values, distributions=params, value=_value(row, objective))
        )
    return study


def importances(
    rows: list[dict[str, Any]], parameters: list[dict[str, Any]], objectives: list[dict]
) -> dict[str, Any]:
    """{"runs": N, "evaluator", "objectives": {name: {parameter: importance}}, "reason"}: the
    importance of each swept parameter for each objective, over the finished runs that have
    every objective and parameter; `reason` says why there is none."""
    finished = [
        r
        for r in rows
        if r["state"] == "finished"
        and all(_value(r, g) is not None for g in objectives)
        and all(p["name"] in r["params"] for p in parameters)
    ]
    out: dict[str, Any] = {"runs": len(finished), "evaluator": EVALUATOR, "objectives": {}}
    spans = {
        p["name"]: distribution([r["params"][p["name"]] for r in finished], p["log"])
        for p in parameters
    }
    spans = {name: span for name, span in spans.items() if span is not None}
    if not objectives or len(finished) < MIN_RUNS or not spans:
        out["reason"] = _why_not(objectives, len(finished), spans)
        return out

    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    with _quiet_optuna():
        for goal in objectives:
            study = _study(finished, spans, goal)
            found = optuna.importance.get_param_importances(study, evaluator=evaluator)
            out["objectives"][goal["name"]] = {k: float(v) for k, v in found.items()}
    out["reason"] = None
    return out


def _value(row: dict[str, Any], goal: dict[str, Any]) -> float | None:
    return row["objectives"].get(goal["name"], row["metric"])


def _why_not(objectives: list[dict], finished: int, spans: dict) -> str:
    if not objectives:
        return "the sweep has no metric"
    if finished < MIN_RUNS:
        return f"needs {MIN_RUNS} finished runs with the metric ({finished} so far)"
    return "no parameter took two different values in the finished runs"
