"""W&B's classic sweep engine (grid, random, bayes, hyperband), owned by the project: a port
of wandb/sweeps 0.3.0 (MIT License, Copyright (c) 2021 Weights and Biases; see
LICENSE-third-party.md) that runs on numpy 1.26 and 2.x without pydantic or jsonref."""

from trainer.sweep.search.wandb_sweeps.config import (
    SweepConfig,
    schema_violations_from_proposed_config,
)
from trainer.sweep.search.wandb_sweeps.run import RunState, SweepRun, next_run, next_runs, stop_runs

__all__ = [
    "RunState",
    "SweepConfig",
    "SweepRun",
    "next_run",
    "next_runs",
    "schema_violations_from_proposed_config",
    "stop_runs",
]
