"""The Gaussian process behind bayes search: its fit on the [0, 1]-encoded parameters, and the
next sample where expected improvement is highest.

Ported from wandb/sweeps 0.3.0 (sweeps/bayes_search.py), MIT License, Copyright (c) 2021
Weights and Biases; see LICENSE-third-party.md. Changes: imports; scikit-learn's convergence
warning is silenced around the fit only (not process-wide); next_sample and
train_gaussian_process split into named helpers. The random draws use numpy's global generator
exactly as W&B's engine does, in the same order.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
from scipy import stats as scipy_stats
from sklearn import gaussian_process as sklearn_gaussian
from sklearn.exceptions import ConvergenceWarning

ArrayLike = Any
floating = float | np.floating
integer = int | np.integer
logger = logging.getLogger(__name__)

GAUSSIAN_PROCESS_NUGGET = 1e-7
STD_NUMERICAL_STABILITY_EPSILON = 1e-6


def fit_normalized_gaussian_process(
    X: ArrayLike, y: ArrayLike, nu: floating = 1.5
) -> tuple[sklearn_gaussian.GaussianProcessRegressor, floating, floating]:
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
    return np.exp(-np.logaddexp(0, -x))


def random_sample(X_bounds: ArrayLike, num_test_samples: integer) -> ArrayLike:
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

    # gaussian process takes a long time to train, so if there's more than max_samples
    # we need to sample from it
    if sample_X.shape[0] > max_samples:
        sample_indices = np.random.randint(sample_X.shape[0], size=max_samples)
        X = sample_X[sample_indices]
        y = sample_y[sample_indices]
    else:
        X = sample_X
        y = sample_y
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
        sample_X: ArrayLike, shape (N_runs, N_params)
            2d array of already evaluated sets of hyperparameters
        sample_y: ArrayLike, shape (N_runs,)
            1d array of already evaluated loss function values
        X_bounds: ArrayLike, optional, shape (N_params, 2), default None
            2d array minimum and maximum values for every dimension of X
        current_X: ArrayLike, optional, shape (N_runs_in_flight, N_params), default None
            hyperparameters currently being explored
        nu: floating, optional, default = 1.5
            input to the Matern function, higher numbers make it smoother. 0.5,
            1.5, 2.5 are good values  see

               http://scikit-learn.org/stable/modules/generated/sklearn.gaussian_process.kernels.Matern.html

        max_samples_for_gp: integer, optional, default 100
            maximum samples to consider (since algo is O(n^3)) for performance,
            but also adds some randomness. this number of samples will be chosen
            randomly from the sample_X and used to train the GP.
        num_points_to_try: integer, optional, default 1000
            number of X values to try when looking for value with highest expected probability
            of improvement
        test_X: X values to test when looking for the best values to try

    Returns:
        suggested_X: optimal X value to try
        prob_of_improvement: probability of an improvement
        predicted_y: predicted value
        predicted_std: stddev of predicted value
        expected_improvement: expected improvement
        warnings: warnings encountered
    """
    sample_X, sample_y, test_X = _checked_samples(sample_X, sample_y, X_bounds, test_X)
    filtered_X, filtered_y = filter_nans(sample_X, sample_y)

    # we can't run this algothim with less than two sample points, so we'll
    # just return a random point
    if filtered_X.shape[0] < 2:
        return _random_suggestion(filtered_X, filtered_y, X_bounds, test_X)

    # build the acquisition function
    (
        gp,
        y_mean,
        y_stddev,
    ) = train_gaussian_process(filtered_X, filtered_y, X_bounds, current_X, nu, max_samples_for_gp)
    # Look for the minimum value of our fitted-target-function + (kappa * fitted-target-std_dev)
    if test_X is None:  # this is the usual case
        test_X = random_sample(X_bounds, num_points_to_try)
    y_pred, y_pred_cov = gp.predict(test_X, return_cov=True)

    # HACK: Covariance matrix uses cholenky decomposition, so
    # use the diagonal of the covariance matrix to get the std_dev
    y_pred_std = np.sqrt(np.diag(y_pred_cov))

    # best value of y we've seen so far.  i.e. y*
    min_unnorm_y = np.min(filtered_y)

    min_norm_y = (min_unnorm_y - y_mean) / y_stddev

    Z = -(y_pred - min_norm_y) / (y_pred_std + STD_NUMERICAL_STABILITY_EPSILON)
    prob_of_improve: np.ndarray = scipy_stats.norm.cdf(Z)
    e_i = -(y_pred - min_norm_y) * scipy_stats.norm.cdf(Z) + y_pred_std * scipy_stats.norm.pdf(Z)

    best_test_X_index = np.argmax(e_i)

    warnings, best_test_X_index = _kernel_bounds_check(gp, test_X, best_test_X_index)

    suggested_X = test_X[best_test_X_index]
    suggested_X_prob_of_improvement = prob_of_improve[best_test_X_index]
    suggested_X_predicted_y = y_pred[best_test_X_index] * y_stddev + y_mean
    suggested_X_predicted_std = y_pred_std[best_test_X_index] * y_stddev

    # recalculate expected improvement
    suggested_X_expected_improvement = _expected_improvement_at(
        y_pred[best_test_X_index], y_pred_std[best_test_X_index], min_unnorm_y, y_mean, y_stddev
    )
    return (
        suggested_X,
        suggested_X_prob_of_improvement,
        suggested_X_predicted_y,
        suggested_X_predicted_std,
        suggested_X_expected_improvement,
        warnings,
    )
