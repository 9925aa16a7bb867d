"""The parameter file W&B's agent gives a sweep trial (WANDB_SWEEP_PARAM_PATH), written with the
rest of a trial's W&B environment by the local agent and read by the trainer. Light imports
only: no torch, no trainer.sweep."""

from __future__ import annotations

import os
from pathlib import Path
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


def wandb_agent_env(
    sweep_id: str, run_id: str, params: dict[str, Any], params_path: Path, run_dir: Path
) -> dict[str, str]:
    """The environment `wandb agent` gives its children (the parameter file written), W&B
    offline, grouped by sweep: the local agent's trials get it too."""
    # lazy: wandb costs 0.5 s at start-up; a trial with logger=none reads this module without it
    from wandb.sdk.lib import config_util

    config_util.save_config_file_from_dict(
        str(params_path), {k: {"value": v} for k, v in params.items()}
    )
    env = dict(os.environ)
    env.update(
        WANDB_RUN_ID=run_id,
        WANDB_SWEEP_ID=sweep_id,
        **{PARAM_PATH_ENV: str(params_path)},
        WANDB_DIR=str(run_dir),
        WANDB_RUN_GROUP=sweep_id,
        WANDB_MODE="offline",
    )
    return env
