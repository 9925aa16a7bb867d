"""Every validation error of a sweep, all reported at once, each naming the parameter and the fix."""

from __future__ import annotations

import pytest

from trainer.config.schema import EPOCH_METRICS, ConfigError
from trainer.sweep.definition.problems import check_sweep, sweep_problems

KEYS = ["optimizer.lr", "optimizer.momentum", "trainer.max_epochs", "data.batch_size"]
GROUPS = {"model": ["small_cnn", "resnet18"], "optimizer": ["sgd", "adamw"]}
METRIC = {"name": "val/acc", "goal": "maximize"}
COMMAND = ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}", "hydra.mode=RUN"]


def sweep(method="random", metric=METRIC, **extra):
    config = {
        "method": method,
        "parameters": {"optimizer.lr": {"values": [0.1]}},
        "command": COMMAND,
    }
    if metric:
        config["metric"] = metric
    params = extra.pop("parameters", None)
    if params is not None:
        config["parameters"] = params
    config.update(extra)
    return config


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (sweep(method="annealing"), "W&B schema"),
        (
            sweep(
                parameters={"optimizer.lr": {"distribution": "uniform", "min": 0.0, "max": 1.0}},
                method="grid",
            ),
            "optimizer.lr: grid search cannot enumerate",
        ),
        (sweep(method="bayes", metric=None), "method bayes needs a metric"),
        (
            sweep(metric=None, early_terminate={"type": "hyperband", "min_iter": 1}),
            "early_terminate needs a metric",
        ),
        (
            sweep(parameters={"optimizer.lr": {"min": 0.5, "max": 0.1}}),
            "optimizer.lr: min 0.5 must be less than max 0.1",
        ),
        (
            sweep(
                parameters={
                    "optimizer.lr": {"distribution": "log_uniform_values", "min": 0.0, "max": 1.0}
                }
            ),
            "optimizer.lr: log_uniform_values takes the actual values, so min must be > 0",
        ),
        (
            sweep(
                parameters={
                    "optimizer.lr": {
                        "distribution": "q_log_uniform_values",
                        "min": -1.0,
                        "max": 1.0,
                        "q": 0.1,
                    }
                }
            ),
            "min must be > 0",
        ),
        (
            sweep(parameters={"optimizer.lr": {"values": [0.1, 0.2], "probabilities": [0.5, 0.6]}}),
            "optimizer.lr: probabilities sum to 1.1, not 1",
        ),
        (
            sweep(parameters={"optimizer.lr": {"values": [0.1, 0.2], "probabilities": [1.0]}}),
            "1 probabilities for 2 values",
        ),
        (
            sweep(
                method="bayes",
                parameters={"optimizer.lr": {"values": [0.1, 0.2], "probabilities": [0.5, 0.5]}},
            ),
            "bayes engine cannot use `probabilities`",
        ),
        (sweep(run_cap=0), "run_cap 0 must be a positive integer"),
        (
            sweep(parameters={"optimizer.lrr": {"values": [0.1]}}),
            "optimizer.lrr: not a key of the composed config nor a config group; did you mean optimizer.lr?",
        ),
        (
            sweep(parameters={"model": {"values": ["small_cnn", "resnet"]}}),
            "model: 'resnet' is not an option of config group model (options: resnet18, small_cnn)",
        ),
        (
            sweep(metric={"name": "val/accuracy", "goal": "maximize"}),
            "metric.name 'val/accuracy' is not logged by the trainer; use one of "
            + ", ".join(EPOCH_METRICS),
        ),
    ],
)
def test_each_problem_is_named(config, expected):
    problems = sweep_problems(config, KEYS, GROUPS)
    assert any(expected in p for p in problems), problems
    with pytest.raises(ConfigError, match="nothing was run"):
        check_sweep(config, KEYS, GROUPS)


def test_valid_sweeps_have_no_problems():
    config = sweep(
        method="bayes",
        early_terminate={"type": "hyperband", "min_iter": 1, "eta": 2},
        run_cap=3,
        parameters={
            "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1},
            "model": {"values": ["small_cnn", "resnet18"]},
            "optimizer": {"value": "adamw"},
        },
    )
    assert sweep_problems(config, KEYS, GROUPS) == []


def test_all_problems_are_reported_at_once():
    config = sweep(
        method="grid",
        run_cap=-1,
        metric={"name": "nope", "goal": "maximize"},
        parameters={
            "optimizer.lr": {"distribution": "uniform", "min": 1.0, "max": 0.1},
            "model": {"values": ["vgg"]},
            "data.batchsize": {"values": [1]},
        },
    )
    with pytest.raises(ConfigError) as err:
        check_sweep(config, KEYS, GROUPS)
    message = str(err.value)
    for part in (
        "run_cap -1",
        "metric.name 'nope'",
        "optimizer.lr: grid",
        "optimizer.lr: min 1.0",
        "'vgg' is not an option",
        "did you mean data.batch_size?",
    ):
        assert part in message


def test_run_cap_0_is_one_problem_not_two():
    problems = sweep_problems(sweep(run_cap=0), KEYS, GROUPS)
    (said,) = [p for p in problems if "run_cap" in p]  # W&B's message, with the fix
    assert said.startswith("W&B schema: run_cap: 0") and "run_cap 0 must be a positive" in said


def test_schema_violations_name_the_offending_key():
    from trainer.sweep.definition.problems import schema_problems

    problems = schema_problems(
        {"method": "random", "parameters": {"optimizer.lr": {"values": [0.1]}}, "run_cap": 0}
    )
    assert any(p.startswith("run_cap: ") for p in problems), problems


@pytest.mark.parametrize(
    "extra",
    [
        {
            "method": "custom",
            "metric": None,
            "metrics": [{"name": "val/loss", "goal": "minimize"}, {"name": "val/acc"}],
            "scheduler": {"engine": "optuna"},
        },
        {"method": "custom", "scheduler": {"engine": "ax"}},
        {"method": "bayes", "scheduler": {"engine": "wandb"}},
    ],
)
def test_newer_wandb_keys_are_valid_configuration(extra):
    """`metrics:`, `scheduler:` and `method: custom`, as W&B's schema knows them today."""
    config = {k: v for k, v in {**sweep(), **extra}.items() if v is not None}
    assert sweep_problems(config, KEYS, GROUPS) == []


def test_a_problem_ending_in_a_period_is_not_doubled():
    with pytest.raises(ConfigError) as err:
        check_sweep(sweep(), KEYS, GROUPS, more=["every trial would fail: x is not known."])
    assert ".." not in str(err.value) and "x is not known. Fix them" in str(err.value)
