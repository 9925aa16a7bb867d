"""Bayes search: a Gaussian process (Matern kernel) on the [0, 1]-encoded parameters of the runs so
far, with the runs in flight as fantasies, and the next run where expected improvement is
highest.

Ported from wandb/sweeps 0.3.0 (sweeps/bayes_search.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. The file keeps upstream's boundaries, so that it diffs
against the next release. Changes: long functions cut into named steps; the
arithmetic is unchanged.
"""

from __future__ import annotations

import logging
import warnings
from copy import deepcopy
from enum import Enum
from typing import Any

import numpy as np
from scipy import stats as scipy_stats
from sklearn import gaussian_process as sklearn_gaussian
from sklearn.exceptions import ConvergenceWarning

from trainer.sweep.search.wandb_sweeps.config import SweepConfig
from trainer.sweep.search.wandb_sweeps.config.schema import fill_validate_metric
from trainer.sweep.search.wandb_sweeps.params import HyperParameter, HyperParameterSet
from trainer.sweep.search.wandb_sweeps.run import (
    RunState,
    SweepRun,
    is_number,
    run_state_is_terminal,
)

ArrayLike = Any
floating = float | np.floating
integer = int | np.integer
logger = logging.getLogger(__name__)


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


GAUSSIAN_PROCESS_NUGGET = 1e-7
STD_NUMERICAL_STABILITY_EPSILON = 1e-6


def fit_normalized_gaussian_process(
    X: ArrayLike, y: ArrayLike, nu: floating = 1.5
) -> tuple[sklearn_gaussian.GaussianProcessRegressor, floating, floating]:
    """A Matern-kernel GP fit on y normalized to mean 0, std 1, with that mean and std."""
    gp = sklearn_gaussian.GaussianProcessRegressor(
        kernel=sklearn_gaussian.kernels.Matern(nu=nu),
        n_restarts_optimizer=2,
        alpha=GAUSSIAN_PROCESS_NUGGET,
        random_state=2,
    )

    y = np.asarray(y, dtype=float)
    y_stddev: ArrayLike
    if len(y) == 1:
        y_mean = y[0]
        y_stddev = 1.0
        y_norm = y - y_mean
    else:
        # Large finite metrics cause np.mean to overflow to inf, so we first normalize
        # everything by the largest metric seen.
        scale = max(float(np.max(np.abs(y))), 1.0)
        y_scaled = y / scale
        scaled_mean = np.mean(y_scaled)
        scaled_stddev = np.std(y_scaled) + STD_NUMERICAL_STABILITY_EPSILON / scale
        y_norm = (y_scaled - scaled_mean) / scaled_stddev
        y_mean = scaled_mean * scale
        y_stddev = scaled_stddev * scale
    with warnings.catch_warnings():  # a noisy, inconsequential notice of the kernel's optimiser
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(X, y_norm)
    return gp, y_mean, y_stddev


def sigmoid(x: ArrayLike) -> ArrayLike:
    """The logistic function, computed without overflow."""
    return np.exp(-np.logaddexp(0, -x))


def random_sample(X_bounds: ArrayLike, num_test_samples: integer) -> ArrayLike:
    """num_test_samples points drawn uniformly within X_bounds (ints for int bounds)."""
    num_hyperparameters = len(X_bounds)
    test_X = np.empty((int(num_test_samples), num_hyperparameters))
    for ii in range(num_test_samples):
        for jj in range(num_hyperparameters):
            if type(X_bounds[jj][0]) is int:
                assert type(X_bounds[jj][1]) is int
                test_X[ii, jj] = np.random.randint(X_bounds[jj][0], X_bounds[jj][1])
            else:
                test_X[ii, jj] = (
                    np.random.uniform() * (X_bounds[jj][1] - X_bounds[jj][0]) + X_bounds[jj][0]
                )
    return test_X


def _in_flight_X(current_X: ArrayLike, max_samples: integer) -> ArrayLike:
    """The finite rows of the in-flight runs' parameters, at most max_samples - 5 of them."""
    current_X = np.array(current_X, dtype=float)
    if len(current_X.shape) != 2:
        raise ValueError("Current X must be a 2 dimensional array")
    current_X = current_X[np.isfinite(current_X).all(axis=1)]

    # we can't let the current samples be bigger than max samples
    # because we need to use some real samples to build the curve
    if current_X.shape[0] > max_samples - 5:
        logger.info(
            "current_X is bigger than max samples - 5 so dropping some currently running parameters"
        )
        current_X = current_X[: (max_samples - 5), :]  # type: ignore
    return current_X


def _subsample(
    sample_X: ArrayLike, sample_y: ArrayLike, max_samples: integer
) -> tuple[ArrayLike, ArrayLike]:
    """At most max_samples samples, drawn with replacement when there are more."""
    # gaussian process takes a long time to train, so if there's more than max_samples
    # we need to sample from it
    if sample_X.shape[0] > max_samples:
        sample_indices = np.random.randint(sample_X.shape[0], size=max_samples)
        X = sample_X[sample_indices]
        y = sample_y[sample_indices]
    else:
        X = sample_X
        y = sample_y
    return X, y


def train_gaussian_process(
    sample_X: ArrayLike,
    sample_y: ArrayLike,
    X_bounds: ArrayLike | None = None,
    current_X: ArrayLike = None,
    nu: floating = 1.5,
    max_samples: integer = 100,
) -> tuple[sklearn_gaussian.GaussianProcessRegressor, floating, floating]:
    """Trains a Gaussian Process function from sample_X, sample_y data.

    Handles the case where there are other training runs in flight (current_X)

    Arguments:
        sample_X: vector of already evaluated sets of hyperparameters
        sample_y: vector of already evaluated loss function values
        X_bounds: minimum and maximum values for every dimension of X
        current_X: hyperparameters currently being explored
        nu: input to the Matern function, higher numbers make it smoother 0.5, 1.5, 2.5 are good values
         see http://scikit-learn.org/stable/modules/generated/sklearn.gaussian_process.kernels.Matern.html

    Returns:
        gp: the gaussian process function
        y_mean: mean
        y_stddev: stddev

        To make a prediction with gp on real world data X, need to call:
        (gp.predict(X) * y_stddev) + y_mean
    """
    if current_X is not None:
        current_X = _in_flight_X(current_X, max_samples)
    if len(sample_y.shape) != 1:
        raise ValueError("Sample y must be a 1 dimensional array")

    if sample_X.shape[0] != sample_y.shape[0]:
        raise ValueError(
            f"Sample X and sample y must be the same size {sample_X.shape[0]} {sample_y.shape[0]}"
        )

    if X_bounds is not None and sample_X.shape[1] != len(X_bounds):
        raise ValueError("Bounds must be the same length as Sample X's second dimension")

    X, y = _subsample(sample_X, sample_y, max_samples)
    gp, y_mean, y_stddev = fit_normalized_gaussian_process(X, y, nu=nu)
    if current_X is not None and len(current_X):
        # if we have some hyperparameters running, we pretend that they return
        # the prediction of the function we've fit
        current_y_fantasy = (gp.predict(current_X) * y_stddev) + y_mean
        # drop fantasies that overflowed so they can't poison the refit
        is_fantasy_finite = np.isfinite(current_y_fantasy)
        X = np.append(X, current_X[is_fantasy_finite], axis=0)
        y = np.append(y, current_y_fantasy[is_fantasy_finite])
        gp, y_mean, y_stddev = fit_normalized_gaussian_process(X, y, nu=nu)
    return gp, y_mean, y_stddev


def filter_nans(sample_X: ArrayLike, sample_y: ArrayLike) -> ArrayLike:
    """Drop samples whose parameters or objective value are NaN or infinite."""
    is_row_finite = np.isfinite(sample_X).all(axis=1) & np.isfinite(sample_y)
    sample_X = sample_X[is_row_finite, :]
    sample_y = sample_y[is_row_finite]
    return sample_X, sample_y


def _checked_samples(
    sample_X: ArrayLike, sample_y: ArrayLike, X_bounds: ArrayLike | None, test_X: ArrayLike | None
) -> tuple[ArrayLike, ArrayLike, ArrayLike | None]:
    """next_sample's inputs as arrays, after checking their shapes agree."""
    # Sanity check the data
    sample_X = np.array(sample_X)
    sample_y = np.array(sample_y)
    if test_X is not None:
        test_X = np.array(test_X)
    if len(sample_X.shape) != 2:
        raise ValueError("Sample X must be a 2 dimensional array")

    if len(sample_y.shape) != 1:
        raise ValueError("Sample y must be a 1 dimensional array")

    if sample_X.shape[0] != sample_y.shape[0]:
        raise ValueError("Sample X and y must be same length")

    if test_X is not None:
        # if test_X is set, usually this is for simulation/testing
        if X_bounds is not None:
            raise ValueError("Can't set test_X and X_bounds")

    else:
        # normal case where we randomly sample our test_X
        if X_bounds is None:
            raise ValueError("Must pass in test_X or X_bounds")
    return sample_X, sample_y, test_X


def _random_suggestion(
    filtered_X: ArrayLike,
    filtered_y: ArrayLike,
    X_bounds: ArrayLike | None,
    test_X: ArrayLike | None,
) -> tuple[ArrayLike, floating, floating, floating, floating, str]:
    """A random point, for fewer than two finite samples."""
    if test_X is not None:
        # pick a random row from test_X
        row = np.random.choice(test_X.shape[0])
        X = test_X[row, :]
    else:
        X = random_sample(X_bounds, 1)[0]
    prediction = 0.0 if filtered_X.shape[0] < 1 else filtered_y[0]
    return (
        X,
        1.0,
        prediction,
        np.nan,
        np.nan,
        "",
    )


def _kernel_bounds_check(
    gp: sklearn_gaussian.GaussianProcessRegressor, test_X: ArrayLike, best_test_X_index: Any
) -> tuple[str, Any]:
    """A warning and a random test point when the fitted kernel sits at its bounds."""
    # Make sure Kernel is not too close to boundaries
    # from https://github.com/scikit-learn/scikit-learn/blob/baf0ea25d6dd034403370fea552b21a6776bef18/sklearn/gaussian_process/kernels.py#L411
    list_close = np.isclose(gp.kernel_.bounds, np.atleast_2d(gp.kernel_.theta).T)
    warnings = ""
    idx = 0
    for hyp in gp.kernel_.hyperparameters:
        if hyp.fixed:
            continue
        for _ in range(hyp.n_elements):
            if list_close[idx, 0] or list_close[idx, 1]:
                warnings = "\n Some dimmensions of kernel are close to their bounds (bad fit), the next sample will be a random sample within parameter space"
                best_test_X_index = np.random.randint(0, test_X.shape[0] - 1)
                break
            idx += 1
    return warnings, best_test_X_index


def _expected_improvement_at(
    y_pred: Any, y_pred_std: Any, min_unnorm_y: Any, y_mean: Any, y_stddev: Any
) -> Any:
    """The expected improvement at one test point."""
    min_norm_y = (min_unnorm_y - y_mean) / y_stddev
    z_best = -(y_pred - min_norm_y) / (y_pred_std + STD_NUMERICAL_STABILITY_EPSILON)
    return -(y_pred - min_norm_y) * scipy_stats.norm.cdf(
        z_best
    ) + y_pred_std * scipy_stats.norm.pdf(z_best)


def _acquisition(
    gp: sklearn_gaussian.GaussianProcessRegressor,
    test_X: ArrayLike,
    min_unnorm_y: Any,
    y_mean: Any,
    y_stddev: Any,
) -> tuple[ArrayLike, ArrayLike, np.ndarray, Any]:
    """The GP's prediction and std at each test point, the probability of improving on the best
    y so far, and the index of the point with the highest expected improvement."""
    y_pred, y_pred_cov = gp.predict(test_X, return_cov=True)

    # HACK: Covariance matrix uses cholenky decomposition, so
    # use the diagonal of the covariance matrix to get the std_dev
    y_pred_std = np.sqrt(np.diag(y_pred_cov))

    min_norm_y = (min_unnorm_y - y_mean) / y_stddev

    Z = -(y_pred - min_norm_y) / (y_pred_std + STD_NUMERICAL_STABILITY_EPSILON)
    prob_of_improve: np.ndarray = scipy_stats.norm.cdf(Z)
    e_i = -(y_pred - min_norm_y) * scipy_stats.norm.cdf(Z) + y_pred_std * scipy_stats.norm.pdf(Z)
    return y_pred, y_pred_std, prob_of_improve, np.argmax(e_i)


def next_sample(
    *,
    sample_X: ArrayLike,
    sample_y: ArrayLike,
    X_bounds: ArrayLike | None = None,
    current_X: ArrayLike | None = None,
    nu: floating = 1.5,
    max_samples_for_gp: integer = 100,
    num_points_to_try: integer = 1000,
    test_X: ArrayLike | None = None,
) -> tuple[ArrayLike, floating, floating, floating, floating, str]:
    """Calculates the best next sample to look at via bayesian optimization.

    Args:
        sample_X: shape (N_runs, N_params), the already evaluated sets of hyperparameters
        sample_y: shape (N_runs,), the already evaluated loss function values
        X_bounds: shape (N_params, 2), minimum and maximum for every dimension of X
        current_X: shape (N_runs_in_flight, N_params), hyperparameters being explored now
        nu: input to the Matern kernel; higher is smoother (0.5, 1.5, 2.5 are good values)
        max_samples_for_gp: most samples the GP trains on (it is O(n^3)); a random subset
            of sample_X when there are more, which also adds some randomness
        num_points_to_try: how many random X to try for the highest expected improvement
        test_X: X values to try instead of random ones (for simulation/testing)

    Returns:
        (suggested_X, prob_of_improvement, predicted_y, predicted_std,
        expected_improvement, warnings): the X to try, the probability it improves, its
        predicted value and that value's stddev, its expected improvement, and any warnings.
    """
    sample_X, sample_y, test_X = _checked_samples(sample_X, sample_y, X_bounds, test_X)
    filtered_X, filtered_y = filter_nans(sample_X, sample_y)

    # we can't run this algothim with less than two sample points, so we'll
    # just return a random point
    if filtered_X.shape[0] < 2:
        return _random_suggestion(filtered_X, filtered_y, X_bounds, test_X)

    min_unnorm_y = np.min(filtered_y)  # best value of y we've seen so far.  i.e. y*
    # build the acquisition function
    gp, y_mean, y_stddev = train_gaussian_process(
        filtered_X, filtered_y, X_bounds, current_X, nu, max_samples_for_gp
    )
    # Look for the minimum value of our fitted-target-function + (kappa * fitted-target-std_dev)
    if test_X is None:  # this is the usual case
        test_X = random_sample(X_bounds, num_points_to_try)
    y_pred, y_pred_std, prob_of_improve, best_test_X_index = _acquisition(
        gp, test_X, min_unnorm_y, y_mean, y_stddev
    )
    warnings, i = _kernel_bounds_check(gp, test_X, best_test_X_index)
    return (
        test_X[i],
        prob_of_improve[i],
        y_pred[i] * y_stddev + y_mean,
        y_pred_std[i] * y_stddev,
        # recalculate expected improvement
        _expected_improvement_at(y_pred[i], y_pred_std[i], min_unnorm_y, y_mean, y_stddev),
        warnings,
    )
