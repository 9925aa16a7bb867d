"""Every problem of a W&B sweep configuration at once, before anything runs."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any

from trainer.config.schema import EPOCH_METRICS, ConfigError
from trainer.sweep.search.distributions import GRID, POSITIVE_MIN, distribution
from trainer.sweep.search.wandb_sweeps.config import (
    ParamValidationError,
    fill_parameter,
    schema_violations_from_proposed_config,
)
from trainer.sweep.search.wandb_sweeps.config.schema import validator
from trainer.sweep.search.wandb_sweeps.params import PARAM_DEPRECATION_MAP
from trainer.sweep.store.directory import wandb_view


def _probability_problems(key: str, spec: dict, method: str | None) -> list[str]:
    """What is wrong with a categorical parameter's `probabilities`."""
    problems = []
    probs = spec["probabilities"]
    values = spec.get("values") or []
    if len(probs) != len(values):
        problems.append(
            f"parameter {key}: {len(probs)} probabilities for {len(values)} values; "
            "give one probability per value"
        )
    if not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        problems.append(
            f"parameter {key}: probabilities sum to {sum(probs):g}, not 1; rescale them"
        )
    if method == "bayes":
        problems.append(
            f"parameter {key}: the bayes engine cannot use `probabilities`; drop them or "
            "use method: random"
        )
    return problems


def parameter_problems(
    key: str,
    spec: Any,
    method: str | None,
    keys: set[str],
    groups: dict[str, list[str]],
) -> list[str]:
    """What is wrong with one parameter's spec, for the method and the composed config."""
    if not isinstance(spec, dict):
        return [
            f"parameter {key}: {spec!r} is not a W&B parameter spec; write {{value: ...}}, "
            "{values: [...]} or {distribution: ..., min: ..., max: ...}"
        ]
    problems = []
    dist = distribution(spec)
    if method == "grid" and dist not in GRID + ("categorical_w_probabilities",):
        problems.append(
            f"parameter {key}: grid search cannot enumerate the continuous distribution {dist}; "
            "give it `values: [...]` or use method: random or bayes"
        )
    low, high = spec.get("min"), spec.get("max")
    if isinstance(low, int | float) and isinstance(high, int | float):
        if low >= high:
            problems.append(f"parameter {key}: min {low} must be less than max {high}")
        if dist in POSITIVE_MIN and low <= 0:
            problems.append(
                f"parameter {key}: {dist} takes the actual values, so min must be > 0 "
                f"(got {low}); use e.g. min: 1e-6"
            )
    if "probabilities" in spec:
        problems.extend(_probability_problems(key, spec, method))
    if key in groups:
        options = groups[key]
        chosen = spec.get("values", [spec["value"]] if "value" in spec else [])
        for value in chosen:
            if str(value) not in options:
                problems.append(
                    f"parameter {key}: {value!r} is not an option of config group {key} "
                    f"(options: {', '.join(sorted(options))})"
                )
    elif key not in keys:
        close = difflib.get_close_matches(key, list(keys) + list(groups), n=1)
        hint = f"did you mean {close[0]}?" if close else "check the spelling in conf/"
        problems.append(
            f"parameter {key}: not a key of the composed config nor a config group; {hint}"
        )
    return problems


def schema_problems(config: dict[str, Any]) -> list[str]:
    """The violations of W&B's sweep schema (as W&B's engine reports them), less its notes on
    the older log distributions (log_uniform & co. take exponents; W&B still runs them)."""
    config = wandb_view(config)  # the keys only the local backend runs are checked apart
    notes = set()
    for name, spec in (config.get("parameters") or {}).items():
        try:
            kind = (fill_parameter(name, spec) or (None,))[0]
        except (ParamValidationError, ValueError):  # nested block, or min >= max: reported below
            continue
        if kind in PARAM_DEPRECATION_MAP:
            notes.add(f"{name} {PARAM_DEPRECATION_MAP[kind]}")
    # The package returns bare messages; name the offending key where the schema knows it.
    where = {
        e.message: ".".join(str(p) for p in e.absolute_path) for e in validator.iter_errors(config)
    }
    return [
        f"{where[m]}: {m}" if where.get(m) else m
        for m in schema_violations_from_proposed_config(config)
        if m not in notes
    ]


def _fix(message: str) -> str:
    """Our fix after a schema message that does not say it."""
    if message.startswith("metrics: ") and message.endswith("is too short"):
        return " (metrics takes two or more objectives; a single one goes in metric: {name, goal})"
    return ""


def _custom_problems(config: dict[str, Any]) -> list[str]:
    """method: custom (W&B's pluggable scheduler) and multi-objective `metrics:`."""
    problems = []
    objectives = config.get("metrics")
    if config.get("method") == "custom" and not config.get("scheduler"):
        problems.append(
            "method: custom needs a scheduler block, e.g. scheduler: {engine: optuna} (or ax); "
            "or use method random, grid or bayes"
        )
    if config.get("method") == "custom" and not (config.get("metric") or objectives):
        problems.append(
            "method: custom needs metric: {name: val/acc, goal: maximize} (or metrics: with two "
            "or more objectives): the optimizer optimises it"
        )
    if not isinstance(objectives, list):
        return problems
    for i, objective in enumerate(objectives):
        name = objective.get("name") if isinstance(objective, dict) else None
        if name is not None and name not in EPOCH_METRICS:
            problems.append(
                f"metrics[{i}].name {name!r} is not logged by the trainer; use one of "
                f"{', '.join(EPOCH_METRICS)}"
            )
    return problems


def sweep_problems(
    config: dict[str, Any], keys: Iterable[str], groups: dict[str, list[str]]
) -> list[str]:
    """All problems of `config` (a W&B sweep config), given the composed config's dotted keys
    and the config groups with their options."""
    problems = [f"W&B schema: {m}{_fix(m)}" for m in schema_problems(config)]
    method = config.get("method")
    metric = config.get("metric")
    if method == "bayes" and not metric:
        problems.append("method bayes needs a metric; set metric: {name: val/acc, goal: maximize}")
    problems += _custom_problems(config)
    if config.get("early_terminate") and not metric:
        problems.append("early_terminate needs a metric; set metric: {name: ..., goal: ...}")
    if isinstance(metric, dict) and metric.get("name") not in EPOCH_METRICS:
        problems.append(
            f"metric.name {metric.get('name')!r} is not logged by the trainer; use one of "
            f"{', '.join(EPOCH_METRICS)}"
        )
    cap = config.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or cap <= 0):
        ours = f"run_cap {cap!r} must be a positive integer (or left out)"
        schema = [p for p in problems if p.startswith("W&B schema: run_cap")]  # one problem
        problems = [p for p in problems if p not in schema] + ["; ".join([*schema, ours])]
    keyset = set(keys)
    for key, spec in (config.get("parameters") or {}).items():
        problems.extend(parameter_problems(key, spec, method, keyset, groups))
    # The schema and our own checks may say the same thing; keep each once, in order.
    return list(dict.fromkeys(problems))


def check_sweep(
    config: dict[str, Any],
    keys: Iterable[str],
    groups: dict[str, list[str]],
    more: Iterable[str] = (),
) -> None:
    """Raise ConfigError listing every problem of `config`, and the `more` found elsewhere."""
    problems = [*sweep_problems(config, keys, groups), *more]
    if problems:
        listed = "; ".join(f"({i}) {p.rstrip('.')}" for i, p in enumerate(problems, 1))
        raise ConfigError(
            f"The sweep configuration has {len(problems)} problem(s), nothing was run: {listed}. "
            "Fix them in conf/sweep/ or in the hydra.sweeper.* overrides."
        )
