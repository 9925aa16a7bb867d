"""Each W&B distribution's CDF and inverse CDF (PPF), keyed by the parameter type that
`fill_parameter` assigns; `HyperParameter.cdf` and `HyperParameter.ppf` dispatch here.

Ported from wandb/sweeps 0.3.0 (sweeps/params.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. Changes: the `HyperParameter.cdf`/`ppf` if-chains became
tables of one function per type; SciPy's statistics module is imported on first use (it takes
most of a second, and sampling needs none of it); the arithmetic is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy

ArrayLike = Any


def q_log_uniform_v1_ppf(x: ArrayLike, min: float, max: float, q: float) -> ArrayLike:
    """Quantized log-uniform PPF with the bounds given as logarithms."""
    r = np.exp(scipy.stats.uniform.ppf(x, min, max - min))
    ret_val = np.round(r / q) * q
    if isinstance(q, int):
        return ret_val.astype(int)
    else:
        return ret_val


def inv_log_uniform_v1_ppf(x: ArrayLike, min: float, max: float) -> ArrayLike:
    """Inverse log-uniform PPF with the bounds given as logarithms."""
    return np.exp(
        -scipy.stats.uniform.ppf(
            1 - x,
            min,
            max - min,
        )
    )


def loguniform_v1_ppf(x: ArrayLike, min: float, max: float) -> ArrayLike:
    """Log-uniform PPF with the bounds given as logarithms."""
    return np.exp(scipy.stats.uniform.ppf(x, min, max - min))


def _quantize(r: Any, q: Any) -> Any:
    """Round r to a multiple of q; ints when q is an int."""
    ret_val = np.round(r / q) * q
    if isinstance(q, int):
        return ret_val.astype(int)
    else:
        return ret_val


def _uniform_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.uniform.cdf(x, c["min"], c["max"] - c["min"])


def _log_uniform_v1_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.uniform.cdf(np.log(x), c["min"], c["max"] - c["min"])


def _log_uniform_v2_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.uniform.cdf(np.log(x), np.log(c["min"]), np.log(c["max"]) - np.log(c["min"]))


def _normal_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.norm.cdf(x, loc=c["mu"], scale=c["sigma"])


def _log_normal_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.lognorm.cdf(x, s=c["sigma"], scale=np.exp(c["mu"]))


def _beta_cdf(c: dict, x: ArrayLike) -> ArrayLike:
    return scipy.stats.beta.cdf(x, a=c["a"], b=c["b"])


CDF: dict[str, Callable[[dict, ArrayLike], ArrayLike]] = {
    "param_single_value": lambda c, x: np.zeros_like(x),
    # NOTE: Indices expected for categorical parameters, not values.
    "param_categorical": lambda c, x: scipy.stats.randint.cdf(x, 0, len(c["values"])),
    "param_categorical_w_probabilities": lambda c, x: np.cumsum(c["probabilities"])[x],
    "param_int_uniform": lambda c, x: scipy.stats.randint.cdf(x, c["min"], c["max"] + 1),
    "param_uniform": _uniform_cdf,
    "param_quniform": _uniform_cdf,
    "param_loguniform": _log_uniform_v1_cdf,
    "param_qloguniform": _log_uniform_v1_cdf,
    "param_loguniform_v2": _log_uniform_v2_cdf,
    "param_qloguniform_v2": _log_uniform_v2_cdf,
    "param_inv_loguniform": lambda c, x: (
        1 - scipy.stats.uniform.cdf(np.log(1 / x), c["min"], c["max"] - c["min"])
    ),
    "param_inv_loguniform_v2": lambda c, x: (
        1
        - scipy.stats.uniform.cdf(
            np.log(1 / x), -np.log(c["max"]), np.abs(np.log(c["max"]) - np.log(c["min"]))
        )
    ),
    "param_normal": _normal_cdf,
    "param_qnormal": _normal_cdf,
    "param_lognormal": _log_normal_cdf,
    "param_qlognormal": _log_normal_cdf,
    "param_beta": _beta_cdf,
    "param_qbeta": _beta_cdf,
}


def _categorical_ppf(c: dict, x: ArrayLike) -> Any:
    """Samples uniformly over the values."""
    retval = [
        c["values"][i]
        for i in np.atleast_1d(scipy.stats.randint.ppf(x, 0, len(c["values"])).astype(int)).tolist()
    ]
    if np.isscalar(x):
        return retval[0]
    return retval


def _categorical_prob_ppf(c: dict, x: ArrayLike) -> Any:
    """Samples by the specified categorical distribution."""
    cdf = np.cumsum(c["probabilities"])
    if np.isscalar(x):
        return c["values"][np.argmin(x >= cdf, axis=-1)]
    else:
        return [c["values"][i] for i in [np.argmin(cdf >= p) for p in x]]


def _uniform_ppf(c: dict, x: ArrayLike) -> Any:
    return scipy.stats.uniform.ppf(x, c["min"], c["max"] - c["min"])


def _normal_ppf(c: dict, x: ArrayLike) -> Any:
    return scipy.stats.norm.ppf(x, loc=c["mu"], scale=c["sigma"])


def _log_normal_ppf(c: dict, x: ArrayLike) -> Any:
    # https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.lognorm.html
    return scipy.stats.lognorm.ppf(x, s=c["sigma"], scale=np.exp(c["mu"]))


def _beta_ppf(c: dict, x: ArrayLike) -> Any:
    return scipy.stats.beta.ppf(x, a=c["a"], b=c["b"])


PPF: dict[str, Callable[[dict, ArrayLike], Any]] = {
    "param_single_value": lambda c, x: c["value"],
    "param_categorical": _categorical_ppf,
    "param_categorical_w_probabilities": _categorical_prob_ppf,
    "param_int_uniform": lambda c, x: (
        scipy.stats.randint.ppf(x, c["min"], c["max"] + 1).astype(int).tolist()
    ),
    "param_uniform": _uniform_ppf,
    "param_quniform": lambda c, x: _quantize(_uniform_ppf(c, x), c["q"]),
    "param_loguniform": lambda c, x: loguniform_v1_ppf(x, c["min"], c["max"]),
    "param_loguniform_v2": lambda c, x: loguniform_v1_ppf(x, np.log(c["min"]), np.log(c["max"])),
    "param_inv_loguniform": lambda c, x: inv_log_uniform_v1_ppf(x, c["min"], c["max"]),
    "param_inv_loguniform_v2": lambda c, x: inv_log_uniform_v1_ppf(
        x, -np.log(c["max"]), -np.log(c["min"])
    ),
    "param_qloguniform": lambda c, x: q_log_uniform_v1_ppf(x, c["min"], c["max"], c["q"]),
    "param_qloguniform_v2": lambda c, x: q_log_uniform_v1_ppf(
        x, np.log(c["min"]), np.log(c["max"]), c["q"]
    ),
    "param_normal": _normal_ppf,
    "param_qnormal": lambda c, x: _quantize(_normal_ppf(c, x), c["q"]),
    "param_lognormal": _log_normal_ppf,
    "param_qlognormal": lambda c, x: _quantize(_log_normal_ppf(c, x), c["q"]),
    "param_beta": _beta_ppf,
    "param_qbeta": lambda c, x: _quantize(_beta_ppf(c, x), c["q"]),
}
