"""The inputs of the parity checks against W&B's `sweeps` 0.3.0: grid configurations, one spec
per distribution, hyperband scenarios on recorded histories and a corpus of sweep
configurations. `generate_fixtures.py` runs them through `sweeps`; the tests through ours."""

from __future__ import annotations

import random
from typing import Any

GRID_CONFIGS: dict[str, dict[str, Any]] = {
    "values": {"a": {"values": [1, 2, 3]}, "b": {"values": ["x", "y"]}},
    "int_uniform": {"a": {"distribution": "int_uniform", "min": 2, "max": 5}, "b": {"value": 7}},
    "inferred_int_uniform": {"a": {"min": 1, "max": 3}, "b": {"values": [0.1, 0.01]}},
    "q_uniform": {"a": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25}},
    "q_uniform_int_q": {"a": {"distribution": "q_uniform", "min": 0, "max": 10, "q": 3}},
    "mixed": {
        "optimizer.lr": {"values": [0.1, 0.01]},
        "trainer.max_epochs": {"min": 1, "max": 2},
        "model": {"values": ["small_cnn", "resnet18"]},
        "c": {"distribution": "constant", "value": 1},
    },
    "nested": {
        "a": {"parameters": {"x": {"values": [1, 2, 3]}, "y": {"min": 1, "max": 2}}},
        "b": {"values": [True, False]},
    },
    "odd_values": {
        "s": {"values": ["with space", "a,b", "k=v", "quote'd"]},
        "l": {"values": [[1, 2], [3]]},
        "n": {"values": [None, 3000000.0, 1e-5]},
    },
    "dict_values": {"d": {"values": [{"p": 1, "q": 2}, {"p": 3}]}, "e": {"values": [1, 2]}},
}

# One spec per W&B distribution (explicit and inferred), with and without their defaults.
DISTRIBUTIONS: dict[str, dict[str, Any]] = {
    "constant": {"distribution": "constant", "value": 0.5},
    "value": {"value": "adamw"},
    "categorical": {"values": ["a", "b", "c", 4]},
    "categorical_probabilities": {"values": ["a", "b", "c"], "probabilities": [0.2, 0.5, 0.3]},
    "int_uniform": {"distribution": "int_uniform", "min": -3, "max": 4},
    "inferred_int_uniform": {"min": 1, "max": 6},
    "uniform": {"distribution": "uniform", "min": -1.0, "max": 3.0},
    "inferred_uniform": {"min": 0.0, "max": 1.0},
    "q_uniform": {"distribution": "q_uniform", "min": 0.0, "max": 2.0, "q": 0.25},
    "q_uniform_int_q": {"distribution": "q_uniform", "min": 0, "max": 20, "q": 4},
    "q_uniform_default_q": {"distribution": "q_uniform", "min": 0.0, "max": 9.0},
    "log_uniform": {"distribution": "log_uniform", "min": -9.2, "max": -2.3},
    "log_uniform_values": {"distribution": "log_uniform_values", "min": 1e-5, "max": 0.1},
    "q_log_uniform": {"distribution": "q_log_uniform", "min": 0.0, "max": 5.0, "q": 2},
    "q_log_uniform_values": {
        "distribution": "q_log_uniform_values",
        "min": 1.0,
        "max": 256.0,
        "q": 8,
    },
    "q_log_uniform_values_float_q": {
        "distribution": "q_log_uniform_values",
        "min": 0.01,
        "max": 1.0,
        "q": 0.01,
    },
    "inv_log_uniform": {"distribution": "inv_log_uniform", "min": 0.0, "max": 4.0},
    "inv_log_uniform_values": {"distribution": "inv_log_uniform_values", "min": 0.01, "max": 1.0},
    "normal": {"distribution": "normal", "mu": 2.0, "sigma": 0.5},
    "normal_defaults": {"distribution": "normal"},
    "q_normal": {"distribution": "q_normal", "mu": 10.0, "sigma": 3.0, "q": 2},
    "q_normal_float_q": {"distribution": "q_normal", "mu": 0.0, "sigma": 1.0, "q": 0.5},
    "log_normal": {"distribution": "log_normal", "mu": 0.0, "sigma": 0.5},
    "q_log_normal": {"distribution": "q_log_normal", "mu": 2.0, "sigma": 0.5, "q": 1},
    "beta": {"distribution": "beta", "a": 2.0, "b": 5.0},
    "beta_defaults": {"distribution": "beta"},
    "q_beta": {"distribution": "q_beta", "a": 0.5, "b": 0.5, "q": 0.1},
}

SAMPLES = 2000  # draws per distribution for the statistical comparison
EXACT = 25  # seeded draws compared value by value (the engine uses `random` as W&B does)


def _histories(rng: random.Random, n_runs: int, max_len: int, goal: str) -> list[dict]:
    """Runs with noisy, mostly improving learning curves of varied length and state."""
    runs = []
    for i in range(n_runs):
        length = rng.randint(0, max_len)
        level = rng.uniform(0.5, 2.0)
        curve = []
        for step in range(length):
            value = level / (1 + 0.3 * step) + rng.gauss(0, 0.05)
            curve.append(1 - value if goal == "maximize" else value)
        history = [{"val/loss": v, "val/acc": v, "epoch": s} for s, v in enumerate(curve)]
        if history and rng.random() < 0.1:  # a diverged step, as a real run logs it
            history[rng.randrange(len(history))]["val/loss"] = float("nan")
        if rng.random() < 0.1:  # a step without the metric
            history.append({"epoch": length})
        state = rng.choice(["running", "running", "finished", "failed", "crashed"])
        runs.append({"name": f"run{i}", "state": state, "history": history})
    return runs


def hyperband_scenarios() -> dict[str, dict[str, Any]]:
    """Hyperband settings × recorded histories; each scenario is one stop decision."""
    settings = {
        "min_iter_eta3": {"type": "hyperband", "min_iter": 1},
        "min_iter2_eta2": {"type": "hyperband", "min_iter": 2, "eta": 2},
        "min_iter_not_strict": {"type": "hyperband", "min_iter": 1, "eta": 2, "strict": False},
        "max_iter_s2": {"type": "hyperband", "max_iter": 9, "s": 2},
        "max_iter_s3_eta2": {"type": "hyperband", "max_iter": 16, "s": 3, "eta": 2},
        "max_iter_not_strict": {
            "type": "hyperband",
            "max_iter": 27,
            "s": 3,
            "eta": 3,
            "strict": False,
        },
    }
    rng = random.Random(11)
    scenarios = {}
    for name, et in settings.items():
        for goal, metric in (("minimize", "val/loss"), ("maximize", "val/acc")):
            for k in range(3):
                scenarios[f"{name}-{goal}-{k}"] = {
                    "config": {
                        "method": "random",
                        "metric": {"name": metric, "goal": goal},
                        "early_terminate": et,
                        "parameters": {"a": {"values": [1, 2]}},
                    },
                    "runs": _histories(rng, rng.randint(3, 25), 12, goal),
                }
    return scenarios


_P = {"optimizer.lr": {"values": [0.1, 0.01]}}
_M = {"name": "val/loss", "goal": "minimize"}

# Sweep configurations, valid and invalid, for the schema's violation messages.
SCHEMA_CORPUS: dict[str, Any] = {
    "valid_grid": {"method": "grid", "parameters": _P},
    "valid_bayes_hyperband": {
        "method": "bayes",
        "metric": _M,
        "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 2},
        "parameters": {
            "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1}
        },
        "run_cap": 4,
        "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
        "program": "train.py",
        "name": "s",
        "description": "d",
        "project": "p",
        "entity": "e",
    },
    "valid_every_distribution": {
        "method": "random",
        "parameters": {k.replace("_", "-"): v for k, v in DISTRIBUTIONS.items()},
    },
    "valid_nested": {
        "method": "random",
        "parameters": {"opt": {"parameters": {"lr": {"min": 0.0, "max": 1.0}}}},
    },
    "valid_metrics_custom": {
        "method": "custom",
        "metrics": [{"name": "val/loss", "goal": "minimize"}, {"name": "val/acc"}],
        "scheduler": {"engine": "optuna"},
        "parameters": _P,
    },
    "valid_scheduler_search_space": {
        "method": "custom",
        "scheduler": {
            "engine": "ax",
            "source": "space.py",
            "optimizer": "build",
            "search_space": "space",
        },
    },
    "valid_scheduler_wandb": {
        "method": "bayes",
        "metric": _M,
        "scheduler": {"engine": "wandb"},
        "parameters": _P,
    },
    "search_space_without_source": {
        "method": "custom",
        "scheduler": {"engine": "ax", "search_space": {"x": [0, 1]}},
    },
    "metrics_one_item": {
        "method": "custom",
        "metrics": [_M],
        "scheduler": {"engine": "optuna"},
        "parameters": _P,
    },
    "valid_target_impute": {
        "method": "bayes",
        "metric": {"name": "val/acc", "goal": "maximize", "target": 0.9, "impute": "best"},
        "parameters": _P,
    },
    "bad_method": {"method": "annealing", "parameters": _P},
    "no_method": {"parameters": _P},
    "no_parameters": {"method": "random"},
    "empty_parameters": {"method": "random", "parameters": {}},
    "bad_goal": {"method": "bayes", "metric": {"name": "x", "goal": "up"}, "parameters": _P},
    "metric_without_name": {"method": "bayes", "metric": {"goal": "minimize"}, "parameters": _P},
    "metric_extra_key": {"method": "bayes", "metric": {"name": "x", "foo": 1}, "parameters": _P},
    "bad_impute": {"method": "bayes", "metric": {"name": "x", "impute": "mean"}, "parameters": _P},
    "min_ge_max": {"method": "random", "parameters": {"a": {"min": 2.0, "max": 1.0}}},
    "min_eq_max_int": {"method": "random", "parameters": {"a": {"min": 3, "max": 3}}},
    "null_bound": {"method": "random", "parameters": {"a": {"min": None, "max": 1.0}}},
    "string_bound": {"method": "random", "parameters": {"a": {"min": "0", "max": 1.0}}},
    "probabilities_length": {
        "method": "random",
        "parameters": {"a": {"values": [1, 2], "probabilities": [1.0]}},
    },
    "probabilities_sum": {
        "method": "random",
        "parameters": {"a": {"values": [1, 2], "probabilities": [0.5, 0.6]}},
    },
    "unknown_distribution": {
        "method": "random",
        "parameters": {"a": {"distribution": "cauchy", "min": 0, "max": 1}},
    },
    "missing_mu_ok_missing_q": {
        "method": "random",
        "parameters": {"a": {"distribution": "q_normal"}},
    },
    "extra_param_key": {
        "method": "random",
        "parameters": {"a": {"values": [1], "default": 1}},
    },
    "values_not_list": {"method": "random", "parameters": {"a": {"values": 3}}},
    "empty_values": {"method": "random", "parameters": {"a": {"values": []}}},
    "deprecated_log": {
        "method": "random",
        "parameters": {
            "a": {"distribution": "log_uniform", "min": -5, "max": 0},
            "b": {"distribution": "inv_log_uniform", "min": 0, "max": 3},
            "c": {"distribution": "q_log_uniform", "min": 0, "max": 3, "q": 1},
        },
    },
    "run_cap_zero": {"method": "random", "parameters": _P, "run_cap": 0},
    "run_cap_string": {"method": "random", "parameters": _P, "run_cap": "3"},
    "unknown_top_key": {"method": "random", "parameters": _P, "parameter": {}},
    "command_not_list": {"method": "random", "parameters": _P, "command": "python train.py"},
    "hyperband_no_iter": {
        "method": "random",
        "metric": _M,
        "early_terminate": {"type": "hyperband", "eta": 2},
        "parameters": _P,
    },
    "hyperband_bad_eta": {
        "method": "random",
        "metric": _M,
        "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 1},
        "parameters": _P,
    },
    "hyperband_min_iter_zero": {
        "method": "random",
        "metric": _M,
        "early_terminate": {"type": "hyperband", "min_iter": 0},
        "parameters": _P,
    },
    "early_terminate_unknown_type": {
        "method": "random",
        "metric": _M,
        "early_terminate": {"type": "median", "min_iter": 1},
        "parameters": _P,
    },
    "metric_and_metrics": {
        "method": "custom",
        "metric": _M,
        "metrics": [_M, {"name": "val/acc", "goal": "maximize"}],
        "scheduler": {"engine": "optuna"},
        "parameters": _P,
    },
    "metrics_without_custom": {
        "method": "bayes",
        "metrics": [_M, {"name": "val/acc", "goal": "maximize"}],
        "parameters": _P,
    },
    "scheduler_bad_engine": {
        "method": "custom",
        "scheduler": {"engine": "hyperopt"},
        "parameters": _P,
    },
    "scheduler_wrong_method": {
        "method": "bayes",
        "metric": _M,
        "scheduler": {"engine": "optuna"},
        "parameters": _P,
    },
    "scheduler_with_early_terminate": {
        "method": "custom",
        "metric": _M,
        "scheduler": {"engine": "optuna"},
        "early_terminate": {"type": "hyperband", "min_iter": 1},
        "parameters": _P,
    },
    "many_problems": {
        "method": "grids",
        "metric": {"name": 3, "goal": "max"},
        "run_cap": -2,
        "parameters": {
            "a": {"min": 1.0, "max": 0.0},
            "b": {"values": [1, 2], "probabilities": [0.3]},
            "c": {"distribution": "beta", "a": "one"},
        },
    },
}
