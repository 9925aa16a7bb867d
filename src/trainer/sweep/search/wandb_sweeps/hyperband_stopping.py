"""Hyperband early termination: which running runs to stop, from the metric histories of all runs.

Ported from wandb/sweeps 0.3.0 (sweeps/hyperband_stopping.py), MIT License, Copyright (c) 2021 Weights and
Biases; see LICENSE-third-party.md. Changes: imports; reads the vendored schema;
hyperband_stop_runs split into named helpers.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np

from trainer.sweep.search.wandb_sweeps.config import SweepConfig, fill_validate_early_terminate
from trainer.sweep.search.wandb_sweeps.config.schema import definition, fill_validate_metric
from trainer.sweep.search.wandb_sweeps.run import RunState, SweepRun


def hyperband_baseline_validate_and_fill(config: dict) -> dict:
    """A copy of the config checked for what hyperband needs, its defaults filled in and
    unknown early_terminate keys dropped."""
    config = deepcopy(config)

    if "metric" not in config:
        raise ValueError('Hyperband stopping requires "metric" section')

    if "early_terminate" not in config:
        raise ValueError('Hyperband stopping requires "early_terminate" section.')

    if config["early_terminate"]["type"] != "hyperband":
        raise ValueError("Sweep config is not configured for hyperband stopping")

    config = fill_validate_metric(config)
    et_config = config["early_terminate"]

    # remove extra keys (that are already ignored anyway) from the early_terminate config dict to avoid triggering a
    # jsonschema validation error. Extra keys are disallowed by the schema but to maintain compatibility we
    # will allow them here.
    allowed_keys = list(definition("hyperband_stopping")["properties"].keys())

    to_delete = []
    for key in et_config:
        if key not in allowed_keys:
            to_delete.append(key)
    for key in to_delete:
        del et_config[key]

    # fill in defaults needed for hyperband
    config = fill_validate_early_terminate(config)

    return config


def _bands(et_config: dict) -> tuple[list[int], float]:
    """The iteration numbers at which runs are judged, and eta, from the early_terminate config."""
    if "max_iter" in et_config:
        max_iter = et_config["max_iter"]
        s = et_config["s"]
        eta = et_config["eta"]

        band = max_iter
        bands = []
        for _i in range(s):
            band /= eta
            if band < 1:
                break
            bands.append(int(band))
        bands = sorted(bands)

    # another way of defining hyperband with min_iter and possibly eta
    elif "min_iter" in et_config:
        min_iter = et_config["min_iter"]
        eta = et_config["eta"]

        band = min_iter
        bands = []
        for _i in range(100):
            bands.append(int(band))
            band *= eta
    else:
        raise ValueError(
            'invalid config for hyperband stopping: either "max_iter" or "min_iter" must be specified'
        )
    return bands, eta


def _minimized_history(run: SweepRun, metric: dict) -> list:
    """The run's valid metric values, negated when the goal is to maximize."""
    history = run.metric_history(metric["name"], filter_invalid=True)
    if metric["goal"] == "maximize":
        history = list(map(lambda x: -x, history))
    return history


def _thresholds(bands: list[int], runs: list[SweepRun], metric: dict, r: float) -> list:
    """Per band, the value a run must beat to be in the top r fraction of all runs there."""
    all_run_histories = []  # we're going to look at every run
    for run in runs:
        history = _minimized_history(run, metric)
        if len(history) > 0:
            all_run_histories.append(history)

    thresholds = []
    for band in bands:
        # values of metric at iteration number "band"
        band_values = [h[band - 1] for h in all_run_histories if len(h) >= band]
        if len(band_values) == 0:
            threshold = np.inf
        else:
            threshold = sorted(band_values)[int(r * len(band_values))]
        thresholds.append(threshold)
    return thresholds


def _judge_run(history: list, bands: list[int], thresholds: list, strict: bool) -> tuple[bool, str]:
    """Whether a running run misses the threshold of the last band it reached, and why."""
    closest_band = -1
    closest_threshold = 0.0
    for band, threshold in zip(bands, thresholds, strict=False):
        if band <= len(history):
            closest_band = band
            closest_threshold = threshold
        else:
            break

    if closest_band == -1:  # no bands apply yet
        return False, ""
    # Conservative termination condition
    condition_val = min(history)  # type: ignore
    if strict:
        # More aggresive, strict termination condition
        condition_val = history[closest_band - 1]
    bandstr = f" (Band: {closest_band} Metric: {condition_val} Threshold: {closest_threshold})"
    return condition_val > closest_threshold, bandstr


def hyperband_stop_runs(
    runs: list[SweepRun],
    config: dict,
    validate: bool = False,
) -> list[SweepRun]:
    """Suggest sweep runs to terminate early using Hyperband (https://arxiv.org/pdf/1603.06560.pdf).

    >>> hyperband_stop_runs(
    ...     [SweepRun(name="a", state=RunState.finished, history=[{"loss": 10}, {"loss": 9}]),
    ...      SweepRun(name="b", state=RunState.running, history=[{"loss": 10}, {"loss": 10}]),
    ...      SweepRun(name="e", state=RunState.finished, history=[{"loss": 10}, {"loss": 6}])],
    ...     {"method": "grid", "metric": {"name": "loss", "goal": "minimize"},
    ...      "early_terminate": {"type": "hyperband", "max_iter": 5, "eta": 2, "s": 2},
    ...      "parameters": {"a": {"values": [1, 2, 3]}}})[0].name
    'b'

    Args:
        runs: The runs in the sweep.
        config: The sweep's config.
        validate: Whether to validate `sweep_config` against the SweepConfig JSONschema.
           If true, will raise a Validation error if `sweep_config` does not conform to
           the schema. If false, will attempt to run the sweep with an unvalidated schema.

    Returns:
        List of runs to stop early.
    """
    if validate:  # this fully validates the entire config
        config = SweepConfig(config)
    # validates the parts of the config hyperband needs, and fills in their defaults
    config = hyperband_baseline_validate_and_fill(config)
    et_config = config["early_terminate"]
    bands, eta = _bands(et_config)
    r = 1.0 / eta
    if len(bands) < 1:
        raise ValueError(
            "Bands must be an array of length at least 1. Try increasing s, decreasing eta, or increasing min_iter."
        )
    if r < 0 or r > 1:
        raise ValueError("r must be a float between 0 and 1")

    thresholds = _thresholds(bands, runs, config["metric"], r)
    pairs = ", ".join(
        f"{band} = {threshold}" for band, threshold in zip(bands, thresholds, strict=False)
    )
    # every run's info shares the one "lines" list, as in the ported code
    info: dict[str, Any] = {"lines": [f"Bands: {pairs}"], "bands": bands, "thresholds": thresholds}

    terminate_runs: list[SweepRun] = []
    for run in runs:
        if run.state != RunState.running:
            continue
        history = _minimized_history(run, config["metric"])
        stop, bandstr = _judge_run(history, bands, thresholds, et_config.get("strict") is True)
        if stop:
            terminate_runs.append(run)
        termstr = " STOP" if stop else ""
        run_info = info.copy()
        run_info["lines"].append(f"Run: {run.name} Step: {len(history)} {bandstr} {termstr}")
        run.early_terminate_info = run_info
    return terminate_runs
