"""Bayes search: a Gaussian process (Matern kernel) on the [0, 1]-encoded parameters of the
runs so far, and the next run where expected improvement is highest.

Ported from wandb/sweeps 0.3.0 (sweeps/bayes_search.py), MIT License, Copyright (c) 2021
Weights and Biases; see LICENSE-third-party.md. Changes: imports; the Gaussian process moved to
gaussian_process.py and the acquisition to expected_improvement.py; _construct_gp_data and
bayes_search_next_run split into named helpers. The random draws use numpy's global generator
exactly as W&B's engine does, in the same order.
"""

from __future__ import annotations

from copy import deepcopy
from enum import Enum

import numpy as np

from trainer.sweep.search.wandb_sweeps.expected_improvement import next_sample
from trainer.sweep.search.wandb_sweeps.gaussian_process import ArrayLike, floating
from trainer.sweep.search.wandb_sweeps.params import HyperParameter, HyperParameterSet
from trainer.sweep.search.wandb_sweeps.run import (
    RunState,
    SweepRun,
    is_number,
    run_state_is_terminal,
)
from trainer.sweep.search.wandb_sweeps.schema import SweepConfig, fill_validate_metric


class ImputeStrategy(str, Enum):
    """How bayes search values a run without a usable metric."""

    best = "best"
    worst = "worst"
    latest = "latest"


def bayes_baseline_validate_and_fill(config: dict) -> dict:
    """A copy of the config checked for what bayes search needs, its metric defaults filled in."""
    config = deepcopy(config)

    if "metric" not in config:
        raise ValueError('Bayesian search requires "metric" section')

    if config["method"] != "bayes":
        raise ValueError("Invalid sweep configuration for bayes_search_next_run.")

    config = fill_validate_metric(config)

    return config


def impute(
    goal: str,
    metric_name: str,
    impute_strategy: ImputeStrategy,
    run: SweepRun | None = None,
    runs: list[SweepRun] | None = None,
) -> floating:
    """Impute the value of a run's metric using a specified strategy."""
    failed_val = 0.0
    worst_func = min if goal == "maximize" else max
    if impute_strategy == ImputeStrategy.best:
        if run is None:
            raise ValueError("impute_strategy == best requires a nonnull run")
        try:
            return run.metric_extremum(
                metric_name, kind="minimum" if goal == "minimize" else "maximum"
            )
        except ValueError:
            return failed_val
    elif impute_strategy == ImputeStrategy.worst:
        # we calc the max metric to put as the metric for failed runs
        # so that our bayesian search stays away from them
        worst_metric: floating = np.inf if goal == "maximize" else -np.inf
        if runs is None:
            raise ValueError("impute_strategy == worst requires nonnull list of runs")
        for run in runs:
            if run_state_is_terminal(run.state):
                try:
                    run_extremum = run.metric_extremum(
                        metric_name, kind="minimum" if goal == "maximize" else "maximum"
                    )
                except ValueError:
                    continue  # exclude run from worst_run calculation
                worst_metric = worst_func(worst_metric, run_extremum)  # type: ignore
        if not np.isfinite(worst_metric):
            return failed_val
        return worst_metric
    elif impute_strategy == ImputeStrategy.latest:
        if run is None:
            raise ValueError("impute_strategy == latest requires a nonnull run")
        history = run.metric_history(metric_name, filter_invalid=True)
        if len(history) == 0:
            return failed_val
        return history[-1]
    else:
        raise ValueError(f"invalid impute strategy: {impute_strategy}")


def _run_metric(
    run: SweepRun,
    runs: list[SweepRun],
    metric: dict,
    strategy: ImputeStrategy,
    worst_metric: floating,
) -> floating:
    """The run's real min/max metric, else a value imputed by `strategy`."""
    goal, metric_name = metric["goal"], metric["name"]
    try:
        return run.metric_extremum(metric_name, kind="maximum" if goal == "maximize" else "minimum")
    except ValueError:
        if strategy != "worst":
            return impute(goal, metric_name, strategy, run=run, runs=runs)  # default
        else:
            return worst_metric


def _split_runs(
    runs: list[SweepRun],
    X_norms: ArrayLike,
    metric: dict,
    impute_strategy: ImputeStrategy,
    worst_metric: floating,
) -> tuple[list, list, list]:
    """The encoded parameters of the runs with a metric (and those metrics), and of the runs
    that are in flight without one."""
    goal, metric_name = metric["goal"], metric["name"]
    sample_X: list = []
    current_X: list = []
    y: list = []
    for run, X_norm in zip(runs, X_norms, strict=False):
        if run.state == RunState.finished:
            y.append(_run_metric(run, runs, metric, impute_strategy, worst_metric))
            sample_X.append(X_norm)
        elif run.state in [RunState.failed, RunState.crashed, RunState.killed]:
            if impute_strategy != "worst":
                value = impute(goal, metric_name, impute_strategy, run=run, runs=runs)
            else:
                value = worst_metric
            y.append(value)
            sample_X.append(X_norm)
        elif run.state in [RunState.running]:
            # Use metric for gaussian training while running, NOT default functionality
            if metric.get("impute_while_running") not in ["false", None]:
                strategy = ImputeStrategy(metric["impute_while_running"])
                y.append(_run_metric(run, runs, metric, strategy, worst_metric))
                sample_X.append(X_norm)
            else:
                current_X.append(X_norm)
        elif run.state in [RunState.preempting, RunState.preempted, RunState.pending]:
            # run hasnt started yet
            # we wont use the metric, but we should pass it into our optimizer to
            # account for the fact that it is running
            current_X.append(X_norm)
        else:
            raise ValueError("Run is in unknown state")
    return sample_X, current_X, y


def _construct_gp_data(
    runs: list[SweepRun], config: dict
) -> tuple[HyperParameterSet, ArrayLike, ArrayLike, ArrayLike, str]:
    """The GP's inputs from the runs so far: parameters, samples, runs in flight, the metric
    (negated when maximizing: next_sample minimizes) and a warning when no metric is valid."""
    goal = config["metric"]["goal"]
    metric_name = config["metric"]["name"]
    impute_strategy = ImputeStrategy(config["metric"]["impute"])
    params = HyperParameterSet.from_config(config["parameters"])

    if len(params.searchable_params) == 0:
        raise ValueError("Need at least one searchable parameter for bayes search.")

    X_norms = params.normalize_runs_as_array(runs)

    # precalculate worst metric, same for all runs
    worst_metric = impute(goal, metric_name, ImputeStrategy.worst, runs=runs)
    sample_X, current_X, y = _split_runs(
        runs, X_norms, config["metric"], impute_strategy, worst_metric
    )

    sample_X = np.empty([0, 0]) if len(sample_X) == 0 else np.asarray(sample_X)

    if len(current_X) > 0:
        current_X = np.array(current_X)

    # impute bad metric values from y
    y = np.asarray(y)
    if len(y) > 0:
        y[~np.isfinite(y)] = worst_metric

    warnings = ""
    if len(y) == 0 or y[~np.asarray(list(map(is_number, y)))].size == len(y):
        warnings += "\nSweep has no valid samples of the metric."

    # next_sample is a minimizer, so if we are trying to
    # maximize, we need to negate y
    y *= -1 if goal == "maximize" else 1

    return params, sample_X, current_X, y, warnings


def _decoded_config(params: HyperParameterSet, suggested_X: ArrayLike) -> dict:
    """The run config of a suggestion, its [0, 1] values mapped back to the original ranges."""
    for param in params:
        if param.type == HyperParameter.CONSTANT:
            continue
        try_value = suggested_X[params.param_names_to_index[param.name]]
        param.value = param.ppf(try_value)
    return params.to_config()


def bayes_search_next_run(
    runs: list[SweepRun],
    config: dict,
    validate: bool = False,
) -> SweepRun:
    """Suggest runs using Bayesian optimization.

    >>> suggestion = bayes_search_next_run([], {
    ...    'method': 'bayes',
    ...    'parameters': {'a': {'min': 1., 'max': 2.}},
    ...    'metric': {'name': 'loss', 'goal': 'maximize'}
    ... })

    Args:
        runs: The runs in the sweep.
        config: The sweep's config.
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.

    Returns:
        The suggested run.
    """
    if validate:
        config = SweepConfig(config)
    config = bayes_baseline_validate_and_fill(config)

    params, sample_X, current_X, y, warnings_construct_gp_data = _construct_gp_data(runs, config)
    X_bounds = [[0.0, 1.0]] * len(params.searchable_params)

    (
        suggested_X,
        suggested_X_prob_of_improvement,
        suggested_X_predicted_y,
        suggested_X_predicted_std,
        suggested_X_expected_improvement,
        warnings_next_sample,
    ) = next_sample(
        sample_X=sample_X,
        sample_y=y,
        X_bounds=X_bounds,
        current_X=current_X if len(current_X) > 0 else None,
    )

    ret_dict = _decoded_config(params, suggested_X)
    info = {
        "success_probability": suggested_X_prob_of_improvement,
        "predicted_value": suggested_X_predicted_y,
        "predicted_value_std_dev": suggested_X_predicted_std,
        "expected_improvement": suggested_X_expected_improvement,
        "warnings": warnings_construct_gp_data + warnings_next_sample,
    }
    return SweepRun(config=ret_dict, search_info=info)


def bayes_search_next_runs(
    runs: list[SweepRun],
    config: dict,
    validate: bool = False,
    n: int = 1,
) -> list[SweepRun]:
    """Suggest n runs by Bayesian optimization, each one counting the ones before it as in flight."""
    ret: list[SweepRun] = []
    for _ in range(n):
        suggestion = bayes_search_next_run(runs + ret, config, validate)
        ret.append(suggestion)
    return ret
