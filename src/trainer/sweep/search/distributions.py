"""W&B parameter distributions: how a spec's distribution is inferred, which families they
form, and how many points a grid takes from one."""

from __future__ import annotations

from typing import Any

import numpy as np

# Distributions W&B's grid search can enumerate.
GRID = ("constant", "categorical", "int_uniform", "q_uniform")
# Distributions defined by min/max alone: `tag(<name>, interval(a, b))` selects one of them.
MIN_MAX = (
    "int_uniform",
    "uniform",
    "log_uniform",
    "log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
)
# Distributions drawn on a log scale (plots use a log axis).
LOG_SCALE = (
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform",
    "q_log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
    "log_normal",
    "q_log_normal",
)
# Log-scale distributions whose min/max are values (not exponents), so min must be > 0.
POSITIVE_MIN = tuple(d for d in LOG_SCALE if d.endswith("_values"))


def distribution(spec: dict[str, Any]) -> str:
    """The W&B distribution of a parameter spec, inferred as W&B infers it."""
    if "distribution" in spec:
        return spec["distribution"]
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical_w_probabilities" if "probabilities" in spec else "categorical"
    if isinstance(spec.get("min"), int) and isinstance(spec.get("max"), int):
        return "int_uniform"
    return "uniform"


def grid_points(spec: dict[str, Any]) -> int:
    """How many values W&B's grid search takes from this parameter (as sweeps' grid_search)."""
    dist = distribution(spec)
    if dist == "constant":
        return 1
    if dist in ("categorical", "categorical_w_probabilities"):
        return len(spec["values"])
    if dist == "int_uniform":
        return max(int(spec["max"]) - int(spec["min"]) + 1, 0)
    if dist == "q_uniform":  # np.arange(min, max, q): max itself is left out
        return len(np.arange(spec["min"], spec["max"], spec.get("q", 1.0)))
    raise ValueError(f"distribution {dist} cannot be enumerated by a grid")
