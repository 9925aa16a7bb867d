"""Grid search: every combination of the discrete parameters, in W&B's order, each once.

Ported from wandb/sweeps 0.3.0 (sweeps/grid_search.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. Changes: imports; the nested-key helpers inlined;
grid_search_next_runs split into named helpers.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import yaml

from trainer.sweep.search.wandb_sweeps.config import SweepConfig
from trainer.sweep.search.wandb_sweeps.params import HyperParameter, HyperParameterSet
from trainer.sweep.search.wandb_sweeps.run import SweepRun


def _get_nested_value(obj: dict, key: list[str]) -> Any:
    """obj[key[0]][key[1]]..."""
    for subkey in key:
        obj = obj[subkey]
    return obj


def _dict_has_nested_key(obj: dict, key: list[str]) -> bool:
    """Whether obj[key[0]][key[1]]... exists."""
    try:
        _get_nested_value(obj, key)
    except KeyError:
        return False
    return True


logger = logging.getLogger(__name__)


def yaml_hash(value: Any) -> str:
    """The MD5 of a value's sorted flow-style YAML, integer floats counted as ints."""
    if isinstance(value, float) and value.is_integer():
        # Convert integer floats to ints, so that e.g. 3000000.0 == 3000000
        # Generally this isn't a problem, but when a run config value is something like "3e6" it's interpreted as a float
        # when creating the hyperparameter set from the sweep config, but becomes an int when it becomes part of the
        # run config in AgentHeartbeat (this happens in the line "configStr := string(config)" in mutation.go)
        value = int(value)
    return hashlib.md5(
        yaml.dump(value, default_flow_style=True, sort_keys=True).encode("ascii")
    ).hexdigest()


_GRID_TYPES = (
    HyperParameter.CATEGORICAL,
    HyperParameter.CONSTANT,
    HyperParameter.INT_UNIFORM,
    HyperParameter.Q_UNIFORM,
)


def _grid_parameters(sweep_config: dict) -> HyperParameterSet:
    """The sweep's parameters with int_uniform and q_uniform turned into categorical ones."""
    if sweep_config["method"] != "grid":
        raise ValueError("Invalid sweep configuration for grid_search_next_run.")

    if "parameters" not in sweep_config:
        raise ValueError('Grid search requires "parameters" section')
    params = HyperParameterSet.from_config(sweep_config["parameters"])

    # Check that all parameters are categorical or constant
    for p in params:
        if p.type not in _GRID_TYPES:
            raise ValueError(
                f"Parameter {p.name} is a disallowed type with grid search. Grid search requires all parameters "
                f"to be categorical, constant, int_uniform, or q_uniform. Specification of probabilities for "
                f"categorical parameters is disallowed in grid search"
            )

    # convert bounded int_uniform and q_uniform parameters to categorical parameters
    for i, p in enumerate(params):
        if p.type == HyperParameter.INT_UNIFORM:
            params[i] = HyperParameter(
                p.name,
                {
                    "distribution": "categorical",
                    "values": [val for val in range(p.config["min"], p.config["max"] + 1)],
                },
            )
        elif p.type == HyperParameter.Q_UNIFORM:
            params[i] = HyperParameter(
                p.name,
                {
                    "distribution": "categorical",
                    "values": np.arange(p.config["min"], p.config["max"], p.config["q"]).tolist(),
                },
            )
    return params


def _known_dict_keys(param_names: list[str], param_values: list[list]) -> dict[str, set[str]]:
    """For dict-valued params, the union of keys across all grid point values.

    Used to strip runtime injected keys before hashing, so that extra keys don't cause
    yaml_hash mismatches and duplicate suggestions.
    """
    param_known_keys: dict[str, set[str]] = {}
    for name, values in zip(param_names, param_values, strict=False):
        keys: set[str] = set()
        for val in values:
            if isinstance(val, dict):
                keys.update(val.keys())
        if keys:
            param_known_keys[name] = keys
    return param_known_keys


def _cached_yaml_hasher() -> Callable[[Any], str]:
    """yaml_hash memoized for one call: many runs share the same value for any given param,
    especially single-value categorical params holding large list or dict values."""
    run_value_hash_cache: dict[tuple[type[Any], str], str] = {}

    def cached_yaml_hash(value: Any) -> str:
        key = (type(value), repr(value))
        try:
            return run_value_hash_cache[key]
        except KeyError:
            cached = yaml_hash(value)
            run_value_hash_cache[key] = cached
            return cached

    return cached_yaml_hash


def _seen_hashes(
    runs: list[SweepRun], param_names: list[str], param_known_keys: dict[str, set[str]]
) -> set[tuple]:
    """The hash tuples of the grid points the existing runs already cover."""
    cached_yaml_hash = _cached_yaml_hasher()
    param_hashes_seen: set[tuple] = set()
    expected_tuple_len = len(param_names)
    for run in runs:
        hashes: list[str] = []
        missing_params: list[str] = []
        for name in param_names:
            nested_key: list[str] = name.split(HyperParameterSet.NESTING_DELIMITER)
            nested_key.insert(1, "value")

            if _dict_has_nested_key(run.config, nested_key):
                run_value = _get_nested_value(run.config, nested_key)
                if name in param_known_keys and isinstance(run_value, dict):
                    run_value = {k: v for k, v in run_value.items() if k in param_known_keys[name]}
                hashes.append(cached_yaml_hash(run_value))
            else:
                missing_params.append(name)

        if len(hashes) != expected_tuple_len:
            logger.warning(
                "grid_search_dedupe_incomplete_hash_tuple",
                extra={
                    "run_name": run.name,
                    "expected_params": expected_tuple_len,
                    "found_params": len(hashes),
                    "missing_params": missing_params,
                    "config_top_level_keys": (sorted(run.config.keys()) if run.config else []),
                },
            )

        param_hashes_seen.add(tuple(hashes))
    return param_hashes_seen


def grid_search_next_runs(
    runs: list[SweepRun],
    sweep_config: dict,
    validate: bool = False,
    n: int = 1,
    randomize_order: bool = False,
) -> list[SweepRun | None]:
    """Suggest runs with Hyperparameters drawn from a grid.

    >>> suggestion = grid_search_next_runs([], {'method': 'grid', 'parameters': {'a': {'values': [1, 2, 3]}}})
    >>> assert suggestion[0].config['a']['value'] == 1

    Args:
        runs: The runs in the sweep.
        sweep_config: The sweep's config.
        randomize_order: Whether to randomize the order of the grid search.
        n: The number of runs to draw
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.

    Returns:
        The suggested runs.
    """
    if validate:
        sweep_config = SweepConfig(sweep_config)
    params = _grid_parameters(sweep_config)

    # we can only deal with discrete params in a grid search
    discrete_params = HyperParameterSet([p for p in params if p.type == HyperParameter.CATEGORICAL])
    param_names = [p.name for p in discrete_params]
    param_values = [p.config["values"] for p in discrete_params]
    param_hashes = [[yaml_hash(value) for value in p.config["values"]] for p in discrete_params]
    param_known_keys = _known_dict_keys(param_names, param_values)
    value_hash_lookup = {
        name: dict(zip(hashes, vals, strict=False))
        for name, vals, hashes in zip(param_names, param_values, param_hashes, strict=False)
    }

    all_param_hashes = list(itertools.product(*param_hashes))
    if randomize_order:
        random.shuffle(all_param_hashes)

    param_hashes_seen = _seen_hashes(runs, param_names, param_known_keys)
    hash_gen = (hash_val for hash_val in all_param_hashes if hash_val not in param_hashes_seen)

    retval: list[SweepRun | None] = []
    for _ in range(n):
        next_hash = next(hash_gen, None)  # this is O(1)
        if next_hash is None:  # we have searched over the entire parameter space
            retval.append(None)
            return retval
        for param, hash_val in zip(discrete_params, next_hash, strict=False):
            param.value = value_hash_lookup[param.name][hash_val]
        retval.append(SweepRun(config=params.to_config()))
        param_hashes_seen.add(next_hash)
    return retval
