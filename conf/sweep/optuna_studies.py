"""Optuna study factories for the sweeps of this folder (`scheduler.optimizer`): each takes W&B's
SweepInfo (offline: entity and project are empty) and returns an optuna.Study whose directions
are the sweep's metric goals."""

import optuna


def tpe_median(sweep):
    """TPE after 3 random trials; a run below the median of earlier runs at the same epoch is
    pruned (from its second epoch on, once 2 runs have finished)."""
    return optuna.create_study(
        direction=sweep.config["metric"]["goal"],
        sampler=optuna.samplers.TPESampler(n_startup_trials=3),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )


def tpe_pareto(sweep):
    """Multi-objective TPE over the sweep's `metrics` (random for the first 4 trials)."""
    return optuna.create_study(
        directions=[metric["goal"] for metric in sweep.config["metrics"]],
        sampler=optuna.samplers.TPESampler(n_startup_trials=4),
    )
