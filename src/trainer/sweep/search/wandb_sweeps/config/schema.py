"""W&B's sweep configuration schema (schema.json, vendored from `sweeps` 0.3.0): parameter
types, value checks and the defaults the engine fills in.

Ported from wandb/sweeps 0.3.0 (sweeps/config/schema.py), MIT License, Copyright (c) 2021
Weights and Biases; see LICENSE-third-party.md. The file keeps upstream's boundaries, so that it
diffs against the next release. Changes: local `$ref`s are resolved by giving each sub-schema
the root's definitions (no jsonref), and the schema is loaded from this package.
"""

from __future__ import annotations

import json
import numbers
from copy import deepcopy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
from jsonschema import Draft7Validator, validators

SCHEMA_PATH = Path(__file__).with_name("schema.json")


class ParamValidationError(Exception):
    """A parameter spec that is a nested `parameters:` block, not a distribution."""


with SCHEMA_PATH.open(encoding="utf-8") as _f:
    sweep_config_jsonschema: dict[str, Any] = json.load(_f)

format_checker = jsonschema.FormatChecker()


@format_checker.checks("float")
def _float_checker(value: Any) -> bool:
    """Whether the value is a float."""
    return isinstance(value, float)


@format_checker.checks("integer")
def _int_checker(value: Any) -> bool:
    """Whether the value is an int."""
    return isinstance(value, int)


validator = Draft7Validator(schema=sweep_config_jsonschema, format_checker=format_checker)


def _extend_with_default(validator_class):
    """A validator class that also fills in the schema's defaults."""
    # https://python-jsonschema.readthedocs.io/en/stable/faq/#why-doesn-t-my-schema-s-default-property-set-the-default-on-my-instance
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        """Validate as usual; when valid, fill in the defaults of absent properties."""
        errored = False
        for error in validate_properties(validator, properties, instance, schema):
            errored = True
            yield error
        if not errored:
            for prop, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(prop, subschema["default"])

    return validators.extend(validator_class, {"properties": set_defaults})


DefaultFiller = _extend_with_default(Draft7Validator)


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """`node` itself, or the definition its top-level `$ref` points at."""
    while "$ref" in node:
        node = sweep_config_jsonschema["definitions"][node["$ref"].split("/")[-1]]
    return node


def definition(name: str) -> dict[str, Any]:
    """A named definition of the schema (param_uniform, metric, hyperband_stopping, ...)."""
    return sweep_config_jsonschema["definitions"][name]


def subschema(node: dict[str, Any]) -> dict[str, Any]:
    """`node` as a standalone schema: its local `$ref`s resolve against the root's definitions."""
    return {**resolve(node), "definitions": sweep_config_jsonschema["definitions"]}


@cache
def _parameter_validators() -> tuple[tuple[str, Draft7Validator], ...]:
    """A validator per parameter type of the schema, in the schema's order."""
    names = [d["$ref"].split("/")[-1] for d in definition("parameter")["anyOf"]]
    return tuple(
        (name, Draft7Validator(subschema(definition(name)), format_checker=format_checker))
        for name in names
    )


def fill_parameter(parameter_name: str, config: dict) -> tuple[str, dict] | None:
    """The schema type of a parameter spec (first matching definition, in the schema's
    order) and the spec with that type's defaults filled in; None when nothing matches."""
    for schema_name, param_validator in _parameter_validators():
        if not param_validator.is_valid(config):
            continue
        if schema_name == "param_dict":
            raise ParamValidationError("Parameter dict cannot be filled.")
        validate_min_max(parameter_name, config)
        filler = DefaultFiller(subschema(definition(schema_name)), format_checker=format_checker)
        config = deepcopy(config)
        filler.validate(config)  # sets the defaults in place
        return schema_name, config
    return None


def validate_min_max(parameter_name: str, parameter_config: dict) -> None:
    """Raise ValueError when a parameter's numeric min is not below its max."""
    if "min" in parameter_config and "max" in parameter_config:
        min_value, max_value = parameter_config["min"], parameter_config["max"]
        # The schema reports non-numeric bounds (e.g. null); only compare numbers here.
        if not isinstance(min_value, numbers.Real) or not isinstance(max_value, numbers.Real):
            return
        if min_value >= max_value:
            raise ValueError(f"{parameter_name}: min {min_value} is not less than max {max_value}")


def validate_categorical_prob(parameter_name: str, parameter_config: dict) -> None:
    """Raise ValueError when probabilities don't match the values or don't sum to 1."""
    if "values" in parameter_config and "probabilities" in parameter_config:
        if len(parameter_config["values"]) != len(parameter_config["probabilities"]):
            raise ValueError(
                f"Parameter {parameter_name}: values {parameter_config['values']}"
                f" and probabilities {parameter_config['probabilities']} are not "
                f"the same length"
            )
        if not np.isclose(sum(parameter_config["probabilities"]), 1.0):
            raise ValueError(
                f"Parameter {parameter_name}: Probabilities "
                f"{parameter_config['probabilities']} do not sum to 1"
            )


def _drop_unknown_enum(metric: dict, schema: dict, key: str) -> None:
    """A goal/impute outside the schema's enum is replaced by the schema's default."""
    if key in metric and metric[key] not in schema["properties"][key]["enum"]:
        del metric[key]


def fill_validate_metric(d: dict) -> dict:
    """A copy of the config with the metric's defaults filled in."""
    d = deepcopy(d)
    if "metric" in d:
        if not isinstance(d["metric"], dict):
            raise ValueError(f"invalid type for metric: expected dict, got {type(d['metric'])}")
        metric_schema = resolve(sweep_config_jsonschema["properties"]["metric"])
        _drop_unknown_enum(d["metric"], metric_schema, "goal")
        _drop_unknown_enum(d["metric"], metric_schema, "impute")
        DefaultFiller(subschema(metric_schema), format_checker=format_checker).validate(d["metric"])
    return d


def fill_validate_metrics(d: dict) -> dict:
    """A copy of the config with every metric of `metrics` filled in."""
    d = deepcopy(d)
    if "metrics" in d:
        if not isinstance(d["metrics"], list):
            raise ValueError(f"invalid type for metrics: expected list, got {type(d['metrics'])}")
        metric_schema = resolve(sweep_config_jsonschema["properties"]["metrics"]["items"])
        filled = []
        for metric in d["metrics"]:
            if not isinstance(metric, dict):
                raise ValueError(f"invalid type for metric: expected dict, got {type(metric)}")
            metric = deepcopy(metric)
            _drop_unknown_enum(metric, metric_schema, "goal")
            _drop_unknown_enum(metric, metric_schema, "impute")
            DefaultFiller(subschema(metric_schema), format_checker=format_checker).validate(metric)
            filled.append(metric)
        d["metrics"] = filled
    return d


def fill_validate_early_terminate(d: dict) -> dict:
    """A copy of the config with early_terminate's defaults filled in."""
    d = deepcopy(d)
    if d["early_terminate"]["type"] == "hyperband":
        filler = DefaultFiller(
            subschema(definition("hyperband_stopping")), format_checker=format_checker
        )
        filler.validate(d["early_terminate"])
    return d


def check_for_deprecated_distributions(parameter_name: str, parameter_config: dict) -> None:
    """Raise ValueError with W&B's note when the spec uses a base-e-exponent distribution."""
    # circle: params imports this module
    from trainer.sweep.search.wandb_sweeps.params import PARAM_DEPRECATION_MAP, HyperParameter

    try:
        param = HyperParameter(parameter_name, parameter_config)  # raises if malformed
    except ParamValidationError:
        return
    if param.type in PARAM_DEPRECATION_MAP:
        raise ValueError(f"{parameter_name} {PARAM_DEPRECATION_MAP[param.type]}")


def fill_validate_schema(d: dict) -> dict:
    """`d` with every parameter's and early_terminate's defaults filled in; raises
    jsonschema.ValidationError listing the violations of an invalid configuration."""
    # circle: cfg imports this module (upstream's lazy import)
    from trainer.sweep.search.wandb_sweeps.config.cfg import schema_violations_from_proposed_config

    violations = schema_violations_from_proposed_config(d)
    if violations:
        raise jsonschema.ValidationError("\n".join(violations))
    validated = deepcopy(d)
    if "parameters" in validated:
        filled = {}
        for k, v in validated["parameters"].items():
            try:
                result = fill_parameter(k, v)
            except ParamValidationError:
                continue
            if result is None:
                raise jsonschema.ValidationError(f"Parameter {k} is malformed")
            filled[k] = result[1]
        validated["parameters"] = filled
    if "early_terminate" in validated:
        validated = fill_validate_early_terminate(validated)
    return validated
