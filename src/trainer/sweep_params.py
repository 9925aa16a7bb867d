"""The parameter file W&B's agent gives a sweep trial (WANDB_SWEEP_PARAM_PATH), read by both the
trainer and the sweep side. Light imports only: no torch, no trainer.sweep."""

from __future__ import annotations

import os
from typing import Any

import yaml

PARAM_PATH_ENV = "WANDB_SWEEP_PARAM_PATH"  # set by `wandb agent` and the local agent


def sweep_param_values(path: str) -> dict[str, Any]:
    """{key: value} from the parameter YAML W&B's agent writes (`{key: {value: v}}`)."""
    with open(path) as handle:
        raw = yaml.safe_load(handle) or {}
    raw.pop("wandb_version", None)  # the header wandb's agent writes into this file
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in raw.items()}


def param_path() -> str | None:
    """The parameter file of this process when a sweep agent started it, else None."""
    path = os.environ.get(PARAM_PATH_ENV)
    return path if path and os.path.isfile(path) else None
