"""The sweep configuration: every violation W&B reports for a proposed config (the schema's,
then the rules of custom schedulers, metrics and parameter values), and `SweepConfig`, a
validated config with W&B's defaults filled in.

Ported from wandb/sweeps 0.3.0 (sweeps/config/cfg.py), MIT License, Copyright (c) 2021 Weights
and Biases; see LICENSE-third-party.md. The file keeps upstream's boundaries, so that it diffs
against the next release. Changes: the custom-scheduler rules and the parameter-value checks are
functions of their own; no `save` or YAML `__str__` on SweepConfig.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import jsonschema

from trainer.sweep.search.wandb_sweeps.config.schema import (
    check_for_deprecated_distributions,
    fill_validate_schema,
    validate_categorical_prob,
    validate_min_max,
    validator,
)

_SUPPORTED_METHODS_BY_ENGINE = {
    "wandb": ["grid", "bayes", "random"],
    "optuna": ["custom"],
    "ax": ["custom"],
}


def scheduler_violations(config: dict, method: Any, scheduler: Any) -> list[str]:
    """What W&B rejects in a config that names a custom scheduler."""
    messages: list[str] = []
    if "controller" in config and config["controller"]["type"] == "local":
        messages.append(
            "`controller: type:local` cannot be used together with `scheduler`: "
            "use `scheduler` instead of `controller`."
        )
    if "early_terminate" in config:
        messages.append(
            "`early_terminate` cannot be used together with `scheduler`: "
            "early termination must be implemented by the custom scheduler "
            "itself."
        )
    if isinstance(scheduler, dict):
        engine = scheduler.get("engine")
        if engine not in _SUPPORTED_METHODS_BY_ENGINE:
            messages.append(
                f"scheduler.engine '{engine}' is not supported. "
                f"supported engines are: {', '.join(_SUPPORTED_METHODS_BY_ENGINE)}"
            )
        elif method not in _SUPPORTED_METHODS_BY_ENGINE[engine]:
            messages.append(
                f"`scheduler.engine: {engine}` does not support `method: {method}`. "
                "supported methods are: "
                + ", ".join(f"`method: {m}`" for m in _SUPPORTED_METHODS_BY_ENGINE[engine])
            )
    return messages


def _parameter_violations(parameters: dict) -> list[str]:
    """min < max, probabilities and deprecated distributions: values inside the document,
    not jsonschema's job."""
    messages: list[str] = []
    for parameter_name, parameter_dict in parameters.items():
        if not isinstance(parameter_dict, dict):
            raise ValueError(f"Invalid configuration for hyperparameter '{parameter_name}'")
        for check in (
            validate_min_max,
            validate_categorical_prob,
            check_for_deprecated_distributions,
        ):
            try:
                check(parameter_name, parameter_dict)
            except (ValueError, jsonschema.ValidationError) as e:
                messages.append(e.args[0])
    return messages


def schema_violations_from_proposed_config(config: dict) -> list[str]:
    """Every violation W&B reports for a sweep configuration, as W&B words it."""
    messages = [f"{error.message}" for error in validator.iter_errors(config)]

    if not isinstance(config, dict):
        raise ValueError("Sweep config must be parsable as a JSON object.")

    method = config.get("method")
    scheduler = config.get("scheduler")
    has_search_space = isinstance(scheduler, dict) and bool(scheduler.get("search_space"))

    if "parameters" not in config and not has_search_space:
        messages.append("`parameters` is required unless `scheduler.search_space` is set.")

    if "metric" in config and "metrics" in config:
        messages.append(
            "`metric` and `metrics` cannot both be set: use `metric` for a "
            "single objective, or `metrics` for multi-objective optimization."
        )
    elif "metrics" in config and method is not None and method != "custom":
        messages.append(
            f"`metrics` requires `method: custom` (got `method: {method}`): "
            "multi-objective optimization is only supported with a custom "
            "scheduler."
        )

    if scheduler is not None:
        messages += scheduler_violations(config, method, scheduler)
    if "parameters" in config:
        messages += _parameter_violations(config["parameters"])
    return messages


class SweepConfig(dict):
    """A validated sweep configuration with W&B's defaults filled in."""

    def __init__(self, d: dict) -> None:
        """Validate `d` (unless it already is a SweepConfig) and fill in W&B's defaults."""
        if not isinstance(d, SweepConfig):
            violations = schema_violations_from_proposed_config(d)
            if violations:
                raise jsonschema.ValidationError("\n".join(violations))
        super().__init__(fill_validate_schema(deepcopy(d)))
