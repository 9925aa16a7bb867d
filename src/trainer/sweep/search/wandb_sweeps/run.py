"""The engine's view of a sweep run, and the two entry points: the next runs of a sweep and
the runs that early termination stops.

Ported from wandb/sweeps 0.3.0 (sweeps/run.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. Changes: SweepRun is a dataclass (no pydantic), imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from numbers import Number
from typing import Any

import numpy as np

from trainer.sweep.search.wandb_sweeps.config import SweepConfig

floating = float | np.floating


class RunState(str, Enum):
    """A run's state, as W&B's engine names it."""

    pending = "pending"
    running = "running"
    finished = "finished"
    killed = "killed"
    crashed = "crashed"
    failed = "failed"
    preempted = "preempted"
    preempting = "preempting"


def run_state_is_terminal(state: RunState) -> bool:
    """Whether a run in this state has ended."""
    return state in [
        RunState.finished,
        RunState.crashed,
        RunState.failed,
        RunState.killed,
    ]


def is_number(x: Any) -> bool:
    """Check if a value is a finite number."""
    try:
        return (
            np.isscalar(x) and np.isfinite(x) and isinstance(x, Number) and not isinstance(x, bool)
        )
    except TypeError:
        return False


@dataclass
class SweepRun:
    """A run of a sweep, as the engine sees it.

    Args:
        name: Name of the run.
        state: State of the run (a RunState value).
        config: the run's parameters, `{name: {"value": v}}`.
        summary_metrics: summary statistics of the run.
        history: the dicts the run logged, one per step.
        search_info: what the search method recorded when it suggested the run.
        early_terminate_info: what the early-terminate algorithm recorded.
        stopped: whether the run was stopped by the sweep.
        should_stop: whether the sweep asked the run to stop.
    """

    name: str | None = None
    summary_metrics: dict | None = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    state: str = RunState.pending.value
    search_info: dict | None = None
    early_terminate_info: dict | None = None
    stopped: bool = False
    should_stop: bool = False
    exitcode: int | None = None
    running: bool | None = None

    def __post_init__(self) -> None:
        self.state = RunState(self.state).value  # "crashed" or RunState.crashed alike

    def metric_history(self, metric_name: str, filter_invalid: bool = False) -> list[floating]:
        """The metric's logged values in order (finite numbers only when filter_invalid)."""
        return [
            d[metric_name]
            for d in self.history
            if metric_name in d and not (filter_invalid and not is_number(d[metric_name]))
        ]

    def summary_metric(self, metric_name: str) -> floating:
        """The metric's summary value; ValueError when the run has none."""
        if self.summary_metrics is None:
            raise ValueError("this run has no summary metrics")
        if metric_name not in self.summary_metrics:
            raise KeyError(f"{metric_name} is not a summary metric of this run.")
        return self.summary_metrics[metric_name]

    def metric_extremum(self, metric_name: str, kind: str) -> floating:
        """Calculate the maximum or minimum value of a specified metric.

        >>> run = SweepRun(history=[{'a': 1}, {'b': 3}, {'a': 2, 'b': 4}], summary_metrics={'a': 50})
        >>> assert run.metric_extremum('a', 'maximum') == 50

        Args:
            metric_name: The name of the target metric.
            kind: What kind of extremum to get (either "maximum" or "minimum").

        Returns:
            The maximum or minimum metric.
        """

        if kind.lower() in ["minimum", "min", "minimize"]:
            cmp_func = min
        elif kind.lower() in ["maximum", "max", "maximize"]:
            cmp_func = max
        else:
            raise ValueError(f'Invalid extremum type {kind}, must be one of ["maximum", "minimum"]')
        try:
            summary_metric = [self.summary_metric(metric_name)]
        except KeyError:
            summary_metric = []
        all_metrics = self.metric_history(metric_name) + summary_metric

        if len(all_metrics) == 0:
            raise ValueError(f"Cannot extract metric {metric_name} from run")

        all_metrics = list(filter(is_number, all_metrics))

        if len(all_metrics) == 0:
            raise ValueError("Run does not have any finite metric values")

        return cmp_func(all_metrics)  # type: ignore


def next_run(
    sweep_config: dict,
    runs: list[SweepRun],
    validate: bool = False,
    **kwargs,
) -> SweepRun | None:
    """The next run of the sweep, or None when the search space is exhausted."""
    return next_runs(sweep_config, runs, validate, 1, **kwargs)[0]


def next_runs(
    sweep_config: dict,
    runs: list[SweepRun],
    validate: bool = False,
    n: int = 1,
    **kwargs,
) -> Sequence[SweepRun | None]:
    """Calculate the next runs in a sweep.

    >>> suggested_run = next_runs({
    ...    'method': 'grid',
    ...    'parameters': {'a': {'values': [1, 2, 3]}}
    ... }, [])
    >>> assert suggested_run[0].config['a']['value'] == 1

    Args:
        sweep_config: The config for the sweep.
        runs: List of runs in the sweep.
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.
        n: the number of runs to return

    Returns:
        The suggested runs.
    """

    # circle: grid_search and random_search import this module (upstream's lazy import)
    from trainer.sweep.search.wandb_sweeps.grid_search import grid_search_next_runs
    from trainer.sweep.search.wandb_sweeps.random_search import random_search_next_runs

    # validate the sweep config
    if validate:
        sweep_config = SweepConfig(sweep_config)

    if "method" not in sweep_config:
        raise ValueError("Sweep config must contain method section")

    if "parameters" not in sweep_config:
        raise ValueError("Sweep config must contain parameters section")

    if not (isinstance(sweep_config["parameters"], dict) and len(sweep_config["parameters"]) > 0):
        raise ValueError("Parameters section of sweep config must be a dict of at least length 1")

    method = sweep_config["method"]

    if method == "grid":
        return grid_search_next_runs(runs, sweep_config, validate=validate, n=n, **kwargs)
    elif method == "random":
        return random_search_next_runs(sweep_config, validate=validate, n=n)
    elif method == "bayes":
        # lazy: scikit-learn's Gaussian process costs 0.64 s at start-up; only bayes needs it
        from trainer.sweep.search.wandb_sweeps.bayes_search import bayes_search_next_runs

        return bayes_search_next_runs(runs, sweep_config, validate=validate, n=n, **kwargs)
    else:
        raise ValueError(
            f'Invalid search type {method}, must be one of ["grid", "random", "bayes"]'
        )


def stop_runs(
    sweep_config: dict,
    runs: list[SweepRun],
    validate: bool = False,
) -> list[SweepRun]:
    """Calculate the runs in a sweep to stop by early termination.

    >>> stop_runs({"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
    ...            "early_terminate": {"type": "hyperband", "max_iter": 5, "eta": 2, "s": 2},
    ...            "parameters": {"a": {"values": [1, 2, 3]}}},
    ...           [SweepRun(name="a", state=RunState.finished, history=[{"loss": 10}, {"loss": 9}]),
    ...            SweepRun(name="b", state=RunState.running, history=[{"loss": 10}, {"loss": 10}]),
    ...            SweepRun(name="e", state=RunState.finished, history=[{"loss": 10}, {"loss": 6}])],
    ... )[0].name
    'b'

    Args:
        sweep_config: The config for the sweep.
        runs: List of runs in the sweep.
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.

    Returns:
        A list of the runs to stop.
    """
    # circle: hyperband_stopping imports this module (upstream's lazy import)
    from trainer.sweep.search.wandb_sweeps.hyperband_stopping import hyperband_stop_runs

    # validate the sweep config
    if validate:
        sweep_config = SweepConfig(sweep_config)

    if "metric" not in sweep_config:
        raise ValueError('early terminate requires "metric" section')

    if "early_terminate" not in sweep_config:
        raise ValueError('early terminate requires "early_terminate" section.')

    if (
        not isinstance(sweep_config["early_terminate"], dict)
        or "type" not in sweep_config["early_terminate"]
    ):
        raise ValueError('early terminate must be a dict with a "type" section')

    et_type = sweep_config["early_terminate"]["type"]

    if et_type == "hyperband":
        return hyperband_stop_runs(runs, sweep_config, validate=validate)
    else:
        raise ValueError(f'Invalid early stopping type {et_type}, must be one of ["hyperband"]')
