"""The deprecation notes for W&B's v1 log distributions (keyed by parameter type), and the
check that raises them.

Ported from wandb/sweeps 0.3.0 (sweeps/params.py, sweeps/config/schema.py), MIT License,
Copyright (c) 2021 Weights and Biases; see LICENSE-third-party.md. Changes: moved out of
params.py and schema.py; reads the vendored schema.
"""

from __future__ import annotations

from trainer.sweep.search.wandb_sweeps import schema
from trainer.sweep.search.wandb_sweeps.schema import ParamValidationError


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


def check_for_deprecated_distributions(parameter_name: str, parameter_config: dict) -> None:
    """Raise ValueError with W&B's note when the spec uses a base-e-exponent distribution."""
    from trainer.sweep.search.wandb_sweeps.params import HyperParameter

    try:
        param = HyperParameter(parameter_name, parameter_config)  # raises if malformed
    except ParamValidationError:
        return
    if param.type in PARAM_DEPRECATION_MAP:
        raise ValueError(f"{parameter_name} {PARAM_DEPRECATION_MAP[param.type]}")
