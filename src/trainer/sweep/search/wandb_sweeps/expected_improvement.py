"""Bayes search's acquisition: of many random test points, the one where the Gaussian process
expects the highest improvement on the best objective value so far.

Ported from wandb/sweeps 0.3.0 (sweeps/bayes_search.py), MIT License, Copyright (c) 2021
Weights and Biases; see LICENSE-third-party.md. Changes: imports; next_sample split into named
helpers. The random draws use numpy's global generator exactly as W&B's engine does, in the
same order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as scipy_stats
from sklearn import gaussian_process as sklearn_gaussian

from trainer.sweep.search.wandb_sweeps.gaussian_process import (
    STD_NUMERICAL_STABILITY_EPSILON,
    ArrayLike,
    filter_nans,
    floating,
    integer,
    random_sample,
    train_gaussian_process,
)


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
