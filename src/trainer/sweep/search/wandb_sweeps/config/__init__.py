"""Sweep config interface (as upstream's `sweeps.config`)."""

from trainer.sweep.search.wandb_sweeps.config.cfg import (
    SweepConfig,
    schema_violations_from_proposed_config,
)
from trainer.sweep.search.wandb_sweeps.config.schema import (
    ParamValidationError,
    fill_parameter,
    fill_validate_early_terminate,
    fill_validate_metrics,
    fill_validate_schema,
)

__all__ = [
    "ParamValidationError",
    "SweepConfig",
    "fill_parameter",
    "fill_validate_early_terminate",
    "fill_validate_metrics",
    "fill_validate_schema",
    "schema_violations_from_proposed_config",
]
