"""Hyperparameters of a sweep: each W&B distribution's CDF, inverse CDF (the sampler) and the
[0, 1] encoding bayes search works in; nested parameter blocks; the deprecation notes of W&B's
v1 log distributions.

Ported from wandb/sweeps 0.3.0 (sweeps/params.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. The file keeps upstream's boundaries, so that it diffs
against the next release. Changes: the `HyperParameter.cdf`/`ppf` if-chains
became tables of one function per type; SciPy's statistics module is imported on first use
(it takes most of a second, and sampling needs none of it); the arithmetic is unchanged.
"""

from __future__ import annotations

import logging
import operator
import random
from collections.abc import Callable
from copy import deepcopy
from functools import reduce
from typing import Any

import jsonschema
import numpy as np
import scipy

from trainer.sweep.search.wandb_sweeps.config import ParamValidationError, fill_parameter, schema
from trainer.sweep.search.wandb_sweeps.run import SweepRun

ArrayLike = Any
logger = logging.getLogger(__name__)


class HyperParameter:
    """One sweep parameter: its W&B type, its filled-in spec and its current value."""

    CONSTANT = "param_single_value"
    CATEGORICAL = "param_categorical"
    CATEGORICAL_PROB = "param_categorical_w_probabilities"
    INT_UNIFORM = "param_int_uniform"
    UNIFORM = "param_uniform"

    LOG_UNIFORM_V1 = "param_loguniform"
    LOG_UNIFORM_V2 = "param_loguniform_v2"

    INV_LOG_UNIFORM_V1 = "param_inv_loguniform"
    INV_LOG_UNIFORM_V2 = "param_inv_loguniform_v2"

    Q_UNIFORM = "param_quniform"

    Q_LOG_UNIFORM_V1 = "param_qloguniform"
    Q_LOG_UNIFORM_V2 = "param_qloguniform_v2"

    NORMAL = "param_normal"
    Q_NORMAL = "param_qnormal"
    LOG_NORMAL = "param_lognormal"
    Q_LOG_NORMAL = "param_qlognormal"
    BETA = "param_beta"
    Q_BETA = "param_qbeta"

    def __init__(self, name: str, config: dict) -> None:
        """A hyperparameter to optimize.

        >>> parameter = HyperParameter('int_unif_distributed', {'min': 1, 'max': 10})
        >>> assert parameter.config['min'] == 1
        >>> parameter = HyperParameter('normally_distributed', {'distribution': 'normal'})
        >>> assert np.isclose(parameter.config['mu'], 0)

        Args:
            name: The name of the hyperparameter.
            config: Hyperparameter config dict.
        """

        self.name = name

        result = fill_parameter(name, config)
        if result is None:
            raise jsonschema.ValidationError(f"invalid hyperparameter configuration: {name}")

        self.type, self.config = result

        if self.config is None or self.type is None:
            raise ValueError(
                "list of allowed schemas has length zero; please provide some valid schemas"
            )

        self.value = None if self.type != HyperParameter.CONSTANT else self.config["value"]

    def value_to_idx(self, value: Any) -> int:
        """Get the index of the value of a categorically distributed HyperParameter.

        >>> parameter = HyperParameter('a', {'values': [1, 2, 3]})
        >>> assert parameter.value_to_idx(2) == 1

        Args:
             value: The value to look up.

        Returns:
            The index of the value.
        """

        if self.type != HyperParameter.CATEGORICAL:
            raise ValueError("Can only call value_to_idx on categorical variable")

        for ii, test_value in enumerate(self.config["values"]):
            if value == test_value:
                return ii

        raise ValueError(
            f"{value} is not a permitted value of the categorical hyperparameter {self.name} "
            f"in the current sweep."
        )

    def cdf(self, x: ArrayLike) -> ArrayLike:
        """Probability that a sample of this hyperparameter is at most x (scalar or 1-d)."""
        if self.type not in CDF:
            raise ValueError("Unsupported hyperparameter distribution type")
        return CDF[self.type](self.config, x)

    def ppf(self, x: ArrayLike) -> Any:
        """The value of this hyperparameter at percentile x in [0, 1] (scalar or 1-d)."""
        if np.any((x < 0.0) | (x > 1.0)):
            raise ValueError("Can't call ppf on value outside of [0,1]")
        if self.type not in PPF:
            raise ValueError("Unsupported hyperparameter distribution type")
        return PPF[self.type](self.config, x)

    def sample(self) -> Any:
        """Randomly sample a value from the distribution of this HyperParameter."""
        return self.ppf(random.uniform(0.0, 1.0))

    def _to_config(self) -> tuple[str, dict]:
        """The parameter as a run config entry: (name, {"value": value})."""
        config = dict(value=self.value)
        return self.name, config

    def _name_and_value(self) -> tuple[str, Any]:
        """The parameter's name and current value."""
        return self.name, self.value


class HyperParameterSet(list):
    """The sweep's parameters, flattened, with the searchable ones indexed."""

    NESTING_DELIMITER: str = ".wbnest[599c28ca25da]."

    def __init__(self, items: list[HyperParameter]) -> None:
        """A set of HyperParameters.

        >>> hp1 = HyperParameter('a', {'values': [1, 2, 3]})
        >>> hp2 = HyperParameter('b', {'distribution': 'normal'})
        >>> len(HyperParameterSet([hp1, hp2]).searchable_params)
        2

        Args:
            items: A list of HyperParameters to construct the set from.
        """
        self.searchable_params: list[HyperParameter] = []
        self.param_names_to_index: dict[str, int] = dict()
        self.param_names_to_param: dict[str, HyperParameter] = dict()

        _searchable_param_index: int = 0
        for item in items:
            if not isinstance(item, HyperParameter):
                raise TypeError(
                    f"Every item in HyperParameterSet must be a HyperParameter, got {item} of type {type(item)}"
                )
            elif not item.type == HyperParameter.CONSTANT:
                # constants do not form part of the search space
                self.searchable_params.append(item)
                self.param_names_to_index[item.name] = _searchable_param_index
                self.param_names_to_param[item.name] = item
                _searchable_param_index += 1

        super().__init__(items)

    @classmethod
    def from_config(cls, config: dict) -> HyperParameterSet:
        """Instantiate a HyperParameterSet based the parameters section of a SweepConfig.

        >>> sweep_config = {'method': 'grid', 'parameters': {'a': {'values': [1, 2, 3]}}}
        >>> hps = HyperParameterSet.from_config(sweep_config['parameters'])

        Args:
            config: The parameters section of a SweepConfig.
        """
        hyperparameters: list[HyperParameter] = []

        def _unnest(d: dict, prefix: str = ""):
            """Recursively search for HyperParameters in a potentially nested dictionary."""
            for key, val in sorted(d.items()):
                assert isinstance(key, str), (
                    f"Sweep config keys must be strings, found {key} of type {type(key)}"
                )
                assert isinstance(val, dict), (
                    f"Sweep config values must be dicts, found {val} of type {type(val)}"
                )
                try:
                    _hp = HyperParameter(f"{prefix}{key}", val)
                except ParamValidationError:
                    assert "parameters" in val, "Param of type DICT must have 'parameters' key"
                    _unnest(
                        val["parameters"],
                        prefix=f"{prefix}{key}{cls.NESTING_DELIMITER}",
                    )
                else:
                    hyperparameters.append(_hp)

        _unnest(config)
        return cls(hyperparameters)

    def to_config(self) -> dict:
        """Convert a HyperParameterSet to a SweepRun config."""

        def _renest(d: dict) -> None:
            """Nest a flattened dict based on a delimiter."""
            if isinstance(d, dict):
                for k in sorted(d.keys()):
                    assert isinstance(k, str), (
                        f"Sweep config keys must be strings, found {k} of type {type(k)}"
                    )
                    if self.NESTING_DELIMITER in k:
                        subdict: Any = d
                        subkeys: list[str] = k.split(self.NESTING_DELIMITER)
                        for i, subkey in enumerate(subkeys[:-1]):
                            if subkey in subdict:
                                subdict = subdict[subkey]
                                if not isinstance(subdict, dict):
                                    conflict_key: str = self.NESTING_DELIMITER.join(
                                        subkeys[: i + 1]
                                    )
                                    raise ValueError(
                                        f"While nesting, found key {subkey} which conflics with key {conflict_key}"
                                    )
                            else:
                                # Create a nested dictionary under the parent key
                                _d: dict = dict()
                                subdict[subkey] = _d
                                subdict = _d
                        if isinstance(subdict, dict):
                            subdict[subkeys[-1]] = d.pop(k)

        # Add only the hyperparameters which aren't dicts
        config: dict = dict()
        for param in self:
            _name, _value = param._name_and_value()
            config[_name] = _value
        config = deepcopy(config)
        _renest(config)
        # Because of historical reason the first level of nesting requires "value" key
        for k, v in config.items():
            config[k] = {"value": v}
        return config

    def _get_val_from_config(self, config: dict, param_name: str) -> Any:
        """Get the value of a parameter from a run config."""
        if param_name in config and "value" in config[param_name]:
            return config[param_name]["value"]

        if self.NESTING_DELIMITER not in param_name:
            #  Not in config, and not nested, from prior run?
            logger.warning(
                f"Parameter '{param_name}' not found in config {config}"  # noqa: E713
            )
            return None

        # iterate through nested params for configs in the nested format
        keys: list[str] = param_name.split(self.NESTING_DELIMITER)
        keys = [keys[0]] + ["value"] + keys[1:]  # first key has a value param

        try:
            return reduce(operator.getitem, keys, config)
        except Exception as e:
            logger.warning(
                f"Nested parameter '{param_name}' not found in config {config}. First key missing: {e}"  # noqa: E713
            )
        return None

    def normalize_runs_as_array(self, runs: list[SweepRun]) -> np.ndarray:
        """Normalize a list of SweepRuns to an ndarray of parameter vectors."""
        normalized_runs: np.ndarray = np.zeros([len(self.searchable_params), len(runs)])
        for param_name, idx in self.param_names_to_index.items():
            _param: HyperParameter = self.param_names_to_param[param_name]
            row: np.ndarray = np.zeros(len(runs))  # default to 0
            for i, run in enumerate(runs):
                _val = self._get_val_from_config(run.config, param_name)
                if not _val:
                    continue

                if _param.type == HyperParameter.CATEGORICAL:
                    row[i] = _param.value_to_idx(_val)
                else:
                    row[i] = _val
            if not np.all(np.isfinite(row)):
                logger.warning(f"Found non-finite value in normalized run row {row}")
            # Convert row to CDF, filter out NaNs
            non_nan_indices = ~np.isnan(row)
            normalized_runs[idx, non_nan_indices] = _param.cdf(row[non_nan_indices])
        return np.transpose(normalized_runs)


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


def make_param_log_deprecation_message(param_type: str, replacement_param_type: str) -> str:
    """The note for a v1 log distribution (bounds as exponents) naming its v2 replacement."""
    deprecated = schema.definition(param_type)["properties"]["distribution"]["enum"][0]
    replacement = schema.definition(replacement_param_type)["properties"]["distribution"]["enum"][0]
    return (
        f"uses {deprecated}, where min/max specify base-e exponents. "
        f"Use {replacement} to specify limit values."
    )


PARAM_DEPRECATION_MAP = {
    "param_loguniform": make_param_log_deprecation_message(
        "param_loguniform", "param_loguniform_v2"
    ),
    "param_inv_loguniform": make_param_log_deprecation_message(
        "param_inv_loguniform", "param_inv_loguniform_v2"
    ),
    "param_qloguniform": make_param_log_deprecation_message(
        "param_qloguniform", "param_qloguniform_v2"
    ),
}
