"""Before a sweep with a `scheduler:` block launches: its `source` file found (next to the sweep
definition, else in the working directory) and made absolute, and every problem of its engine,
source functions and parameters listed, in W&B's own words where W&B refuses something."""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.sweep.definition.problems import parameter_problems
from trainer.sweep.search.custom_method import OPTIMIZER_ENGINES, engine_of, missing_engine
from trainer.sweep.search.suggest import wandb_door as wb

# What W&B's mapping to each engine takes (its docstrings), for the "use instead" of a refusal.
_MAPPED = {
    "optuna": "uniform, int_uniform, q_uniform, log_uniform_values, q_log_uniform_values, values",
    "ax": "uniform, int_uniform, q_uniform, log_uniform_values, q_log_uniform_values with q: 1, "
    "values",
}


def definition_dirs(choices: Mapping[str, Any], sources: Iterable[Mapping[str, Any]]) -> list[Path]:
    """The folder of the chosen sweep definition (`sweep=<name>`) in each file config source."""
    choice = choices.get("sweep")
    found = []
    for source in sources if choice else ():
        if source.get("schema") == "file":
            definition = Path(str(source.get("path"))) / "sweep" / f"{choice}.yaml"
            if definition.is_file():
                found.append(definition.parent.resolve())
    return found


def resolve_source(config: dict[str, Any], search: Iterable[Path]) -> dict[str, Any]:
    """`config` with `scheduler.source` made absolute when it names a file next to the sweep
    definition (`search`) or in the working directory; left as written when it names none."""
    scheduler = config.get("scheduler")
    if not isinstance(scheduler, dict) or not isinstance(scheduler.get("source"), str):
        return config
    source = Path(scheduler["source"]).expanduser()
    for folder in [*search, Path.cwd()]:
        candidate = source if source.is_absolute() else folder / source
        if candidate.is_file():
            return {**config, "scheduler": {**scheduler, "source": str(candidate.resolve())}}
    return config


class _Collect(logging.Handler):
    """Keeps W&B's notes (what its mapping changes) to show them in our words."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(f"trainer.sweep.check.{name}")
    log.handlers, log.propagate = [handler], False
    return log


@dataclass
class SchedulerCheck:
    """The problems found (numbered with the sweep's other problems), W&B's notes, and what a
    define-by-run function returned for one throwaway trial."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sample: dict[str, Any] | None = None

    def trial_view(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config whose first listed values compose the first trial (the sampled values of
        a define-by-run search space)."""
        if self.sample is None:
            return config
        return {**config, "parameters": {k: {"value": v} for k, v in self.sample.items()}}


def _alternative(spec: Any, engine: str) -> str:
    """What to write instead of a parameter W&B's mapping refuses."""
    dist = spec.get("distribution") if isinstance(spec, dict) else None
    low, high = (spec.get("min"), spec.get("max")) if isinstance(spec, dict) else (None, None)
    numbers = all(isinstance(v, int | float) for v in (low, high))
    if dist in ("log_uniform", "q_log_uniform") and numbers:
        return (
            f"write it as {dist}_values with min: {math.exp(low):.4g}, max: {math.exp(high):.4g} "
            "(the values themselves, not their natural logarithms)"
        )
    return (
        f"use a distribution W&B maps to {engine} ({_MAPPED[engine]}), or scheduler.engine: "
        f"wandb with method: random or bayes, which samples {dist}"
    )


def _wandb_engine_problems(scheduler: dict[str, Any], backend: str | None) -> list[str]:
    problems = [
        f"scheduler.{key}: engine wandb does not use it (W&B ignores it); drop it, or use "
        "engine: optuna"
        for key in ("optimizer", "search_space")
        if scheduler.get(key)
    ]
    if backend == "wandb" and importlib.util.find_spec("sweeps") is None:
        problems.append(
            "scheduler.engine: wandb on the W&B server is driven by `wandb sweep-scheduler` here, "
            "which needs W&B's sweeps package (pip install sweeps==0.3.0; it pins numpy<2): drop "
            "the scheduler block to let the server search, or use engine: optuna"
        )
    return problems


def check(
    config: dict[str, Any],
    keys: Iterable[str],
    groups: dict[str, list[str]],
    backend: str | None = None,
) -> SchedulerCheck:
    """Every problem of the sweep's scheduler block (none without one)."""
    found = SchedulerCheck()
    scheduler, engine = config.get("scheduler"), engine_of(config)
    if not isinstance(scheduler, dict):
        return found
    if engine == "wandb":
        found.problems += _wandb_engine_problems(scheduler, backend)
    if engine not in OPTIMIZER_ENGINES:
        return found
    missing = missing_engine(engine)
    if missing:
        found.problems.append(missing)
        return found
    found.problems += _source_problems(config, scheduler, engine, found)
    found.problems += _parameter_refusals(config, engine, found)
    if found.sample is not None:
        keyset = set(keys)
        for key, value in found.sample.items():
            for problem in parameter_problems(key, {"value": value}, "custom", keyset, groups):
                found.problems.append(f"scheduler.search_space returns {problem}")
    if not found.problems:
        reason = wb.build_refusal(config, _logger("build", logging.NullHandler()))
        found.problems += [reason] if reason else []
    return found


def _source_problems(
    config: dict[str, Any], scheduler: dict[str, Any], engine: str, found: SchedulerCheck
) -> list[str]:
    """A missing source file, W&B's reasons against its functions; the define-by-run sample."""
    source, space = scheduler.get("source"), scheduler.get("search_space")
    problems = []
    if space and engine == "ax":
        problems.append(
            "scheduler.search_space: engine ax takes no define-by-run function (W&B ignores it); "
            "use engine: optuna, or list the parameters"
        )
    if space and config.get("parameters"):
        problems.append(
            f"parameters ({', '.join(config['parameters'])}) are not used when "
            "scheduler.search_space defines the search space (W&B ignores them): drop one of them"
        )
    if source and not Path(source).is_file():
        return problems + [
            f"scheduler.source {source!r}: no such file next to the sweep definition nor in the "
            f"working directory ({Path.cwd()}); give a path relative to either, or an absolute one"
        ]
    reasons = wb.source_refusals(config, _logger("source", logging.NullHandler())) if source else []
    if space and engine == "optuna" and not reasons:
        try:
            found.sample, names = wb.sample_search_space(config, _logger("sample", _Collect()))
        except Exception as err:  # the user's function: in its own words
            return [
                *problems,
                f"scheduler.search_space: calling it raised {type(err).__name__}: {err}",
            ]
        unnamed = [name for name in names if name not in found.sample]
        if unnamed:  # W&B replays a stored run into a rebuilt study by the returned keys
            reasons.append(
                f"scheduler.search_space: trial.suggest_* names {', '.join(unnamed)} are not keys "
                "it returns; name each after the Hydra key it returns (trial.suggest_float("
                "'optimizer.lr', ...)) so that a rebuilt optimizer replays stored runs exactly"
            )
    return problems + reasons


def _parameter_refusals(config: dict[str, Any], engine: str, found: SchedulerCheck) -> list[str]:
    notes = _Collect()
    refused = wb.mapping_refusals(config, _logger("mapping", notes))
    found.notes += [f"W&B's {engine} mapping: {line}" for line in notes.lines]
    return [
        f"parameter {name}: W&B's {engine} mapping refuses it ({reason}); "
        + _alternative(config["parameters"][name], engine)
        for name, reason in refused.items()
    ]
