"""The Gaussian process behind bayes search: its fit on the [0, 1]-encoded parameters, with
the runs in flight as fantasies, and the random test points it is asked about.

Ported from wandb/sweeps 0.3.0 (sweeps/bayes_search.py), MIT License, Copyright (c) 2021
Weights and Biases; see LICENSE-third-party.md. Changes: imports; scikit-learn's convergence
warning is silenced around the fit only (not process-wide); a note goes to the logger instead
of stdout; train_gaussian_process split into named helpers. The random draws use numpy's
global generator exactly as W&B's engine does, in the same order.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
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
