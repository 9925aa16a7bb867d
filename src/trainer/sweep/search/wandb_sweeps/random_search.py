"""Random search: every parameter drawn from its W&B distribution.

Ported from wandb/sweeps 0.3.0 (sweeps/random_search.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. Changes: imports.
"""

from __future__ import annotations

from trainer.sweep.search.wandb_sweeps.config import SweepConfig
from trainer.sweep.search.wandb_sweeps.params import HyperParameterSet
from trainer.sweep.search.wandb_sweeps.run import SweepRun


def random_search_next_runs(
    sweep_config: dict, validate: bool = False, n: int = 1
) -> list[SweepRun]:
    """Suggest runs with Hyperparameters sampled randomly from specified distributions.

    >>> suggestions = random_search_next_runs({'method': 'random', 'parameters': {'a': {'min': 1., 'max': 2.}}})

    Args:
        sweep_config: The sweep's config.
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.
        n: The number of runs to return

    Returns:
        The suggested runs.
    """

    # ensure that the sweepconfig is properly formatted
    if validate:
        sweep_config = SweepConfig(sweep_config)

    if sweep_config["method"] != "random":
        raise ValueError("Invalid sweep configuration for random_search_next_run.")
    params = HyperParameterSet.from_config(sweep_config["parameters"])

    retval = []
    for _ in range(n):
        for param in params:
            param.value = param.sample()
        run = SweepRun(config=params.to_config())
        retval.append(run)

    return retval
