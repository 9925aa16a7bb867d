"""Sweep definitions and Hydra sweep syntax -> W&B sweep config, and the trial command."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from trainer.sweep.definition.command import trial_command
from trainer.sweep.definition.translate import (
    TranslationError,
    build_sweep_config,
    flatten_parameters,
    params_overrides,
    run_count,
    spelling_problems,
    split_overrides,
)


@pytest.mark.parametrize(
    ("override", "spec"),
    [
        ("a=1,2.5,x", {"values": [1, 2.5, "x"]}),
        ("model=small_cnn,resnet18", {"values": ["small_cnn", "resnet18"]}),
        ('a=choice("a b",true)', {"values": ["a b", True]}),
        ("a=[1,2],[3]", {"values": [[1, 2], [3]]}),
        ("a=range(1,5)", {"values": [1, 2, 3, 4]}),
        ("a=range(0,10,4)", {"values": [0, 4, 8]}),
        ("a=interval(0,1)", {"distribution": "uniform", "min": 0.0, "max": 1.0}),
        ("a=int(interval(1,10))", {"distribution": "int_uniform", "min": 1, "max": 10}),
        (
            "a=tag(log,interval(1e-5,1e-1))",
            {"distribution": "log_uniform_values", "min": 1e-5, "max": 0.1},
        ),
        (
            "a=tag(inv_log_uniform_values,interval(1,10))",
            {"distribution": "inv_log_uniform_values", "min": 1.0, "max": 10.0},
        ),
        (
            "a=tag(log_uniform,interval(-5,0))",
            {"distribution": "log_uniform", "min": -5.0, "max": 0.0},
        ),
    ],
)
def test_hydra_sweep_syntax_becomes_wandb_spec(override, spec):
    fixed, swept = split_overrides([override])
    assert fixed == []
    assert swept == {override.split("=")[0]: spec}


@pytest.mark.parametrize("override", ["a=tag(q_uniform,interval(0,1))", "a=tag(foo,interval(0,1))"])
def test_tags_that_need_more_than_min_max_are_refused(override):
    with pytest.raises(TranslationError, match="tag"):
        split_overrides([override])


def test_plain_overrides_are_fixed_for_every_trial_and_sweeper_keys_dropped():
    fixed, swept = split_overrides(
        ["a=1", "+b=x", "++c.d=2", "~e", "sweep=lr_random", "hydra.sweeper.dry_run=true"]
    )
    assert fixed == ["a=1", "+b=x", "++c.d=2", "~e", "sweep=lr_random"]
    assert swept == {}


def test_nested_parameters_are_flattened_to_dotted_keys():
    nested = {
        "optimizer": {
            "parameters": {"lr": {"values": [0.1]}, "x": {"parameters": {"y": {"value": 1}}}}
        },
        "model": {"values": ["a"]},
    }
    assert flatten_parameters(nested) == {
        "optimizer.lr": {"values": [0.1]},
        "optimizer.x.y": {"value": 1},
        "model": {"values": ["a"]},
    }


ALL_FORMS = {
    "p.value": {"value": 3},
    "p.values": {"values": [1, 2]},
    "p.probs": {"values": [1, 2], "probabilities": [0.3, 0.7]},
    "p.int": {"min": 1, "max": 4},
    "p.float": {"min": 0.1, "max": 0.4},
    **{
        f"d.{name}": {"distribution": name, **args}
        for name, args in {
            "constant": {"value": 1},
            "categorical": {"values": [1, 2]},
            "categorical_w_probabilities": {"values": [1, 2], "probabilities": [0.5, 0.5]},
            "int_uniform": {"min": 1, "max": 5},
            "uniform": {"min": 0.0, "max": 1.0},
            "q_uniform": {"min": 0.0, "max": 1.0, "q": 0.25},
            "log_uniform": {"min": -5.0, "max": 0.0},
            "log_uniform_values": {"min": 1e-5, "max": 1.0},
            "q_log_uniform": {"min": 0.0, "max": 3.0, "q": 1.0},
            "q_log_uniform_values": {"min": 1.0, "max": 100.0, "q": 1.0},
            "inv_log_uniform": {"min": -3.0, "max": 0.0},
            "inv_log_uniform_values": {"min": 1.0, "max": 10.0},
            "normal": {"mu": 0.0, "sigma": 1.0},
            "q_normal": {"mu": 0.0, "sigma": 1.0, "q": 0.5},
            "log_normal": {"mu": 0.0, "sigma": 1.0},
            "q_log_normal": {"mu": 0.0, "sigma": 1.0, "q": 0.5},
            "beta": {"a": 2.0, "b": 3.0},
            "q_beta": {"a": 2.0, "b": 3.0, "q": 0.1},
        }.items()
    },
}


def test_every_wandb_parameter_form_passes_through_and_is_schema_valid():
    from trainer.sweep.definition.problems import schema_problems

    config = build_sweep_config({"method": "random", "parameters": ALL_FORMS}, [])
    assert config["parameters"] == ALL_FORMS
    assert schema_problems(config) == []


def test_command_line_wins_and_builds_the_command():
    sweeper = {
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "run_cap": None,
        "parameters": {"optimizer.lr": {"values": [0.1]}, "model": {"values": ["a", "b"]}},
    }
    config = build_sweep_config(sweeper, ["optimizer.lr=0.2,0.3", "model=small_cnn", "x=1"])
    assert config["parameters"] == {"optimizer.lr": {"values": [0.2, 0.3]}}
    assert config["command"] == trial_command(["model=small_cnn", "x=1"])
    assert config["command"][:5] == [
        "${env}",
        "${interpreter}",
        "-m",
        "trainer",
        "${args_no_hyphens}",
    ]
    assert "run_cap" not in config
    assert run_count(config) == 2


# Hydra's sweepers' spelling (hydra.sweeper.params) and the command line's, side by side.
PARAMS = {
    "optimizer.lr": "tag(log, interval(1e-4, 1e-1))",
    "optimizer.momentum": "interval(0.5, 0.99)",
    "model": "choice(small_cnn, resnet18)",
    "data.batch_size": "range(16, 65, step=16)",
    "trainer.max_epochs": 3,  # a plain value: fixed for every trial (as the YAML gives it)
}
COMMAND_LINE = [
    "optimizer.lr=tag(log,interval(1e-4,1e-1))",
    "optimizer.momentum=interval(0.5,0.99)",
    "model=small_cnn,resnet18",
    "data.batch_size=range(16,65,step=16)",
    "trainer.max_epochs=3",
]


def test_params_are_translated_as_the_command_line_is():
    from trainer.sweep.definition.problems import schema_problems

    from_params = build_sweep_config({"method": "random", "params": PARAMS}, [])
    from_command_line = build_sweep_config({"method": "random"}, COMMAND_LINE)
    assert from_params == from_command_line
    assert from_params["parameters"] == {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1},
        "optimizer.momentum": {"distribution": "uniform", "min": 0.5, "max": 0.99},
        "model": {"values": ["small_cnn", "resnet18"]},
        "data.batch_size": {"values": [16, 32, 48, 64]},
    }
    assert from_params["command"] == trial_command(["trainer.max_epochs=3"])
    assert schema_problems(from_params) == []


def test_the_command_line_wins_over_params():
    sweeper = {
        "method": "grid",
        "params": {"optimizer.lr": "choice(0.1, 0.01)", "trainer.max_epochs": "3", "x": "1"},
    }
    config = build_sweep_config(sweeper, ["optimizer.lr=0.5", "trainer.max_epochs=1,2"])
    assert config["parameters"] == {"trainer.max_epochs": {"values": [1, 2]}}
    assert config["command"] == trial_command(["x=1", "optimizer.lr=0.5"])


@pytest.mark.parametrize(
    "value", ["choice(0.1, 0.01", "tag(log, interval(1e-4,))", "interval(0.1 0.9)"]
)
def test_params_outside_hydras_grammar_name_their_key(value):
    with pytest.raises(TranslationError, match=r"^hydra\.sweeper\.params\.optimizer\.lr: "):
        params_overrides({"model": "choice(a, b)", "optimizer.lr": value})
    with pytest.raises(TranslationError, match="tag\\(...\\) of an interval must be `log`"):
        build_sweep_config({"params": {"a": "tag(q_uniform, interval(0, 1))"}}, [])


def test_both_spellings_in_one_definition_is_a_problem_naming_the_two_keys():
    both = {
        "params": {"optimizer.lr": "interval(0.01, 0.1)"},
        "parameters": {"model": {"values": ["small_cnn"]}},
    }
    (problem,) = spelling_problems(both)
    assert "hydra.sweeper.params and hydra.sweeper.parameters are both set" in problem
    assert spelling_problems({"params": PARAMS, "parameters": {}}) == []
    assert spelling_problems({"params": None, "parameters": both["parameters"]}) == []
    assert spelling_problems({"params": PARAMS}) == []


@pytest.mark.parametrize(
    ("config", "count"),
    [
        (
            {
                "method": "grid",
                "parameters": {
                    "a": {"values": [1, 2, 3]},
                    "b": {"min": 1, "max": 4, "distribution": "int_uniform"},
                },
            },
            12,
        ),
        ({"method": "grid", "run_cap": 5, "parameters": {"a": {"values": [1, 2, 3, 4, 5, 6]}}}, 5),
        ({"method": "random", "run_cap": 7, "parameters": {}}, 7),
        ({"method": "bayes", "parameters": {}}, "unbounded"),
    ],
)
def test_run_count(config, count):
    assert run_count(config) == count


def _engine_enumeration(config: dict) -> int:
    from trainer.sweep.search import classic
    from trainer.sweep.store.database import RunRecord

    runs: list[RunRecord] = []
    while (suggestion := classic.next_params(config, runs)) is not None:
        runs.append(
            RunRecord(id=f"r{len(runs)}", seq=len(runs), state="finished", params=suggestion[0])
        )
    return len(runs)


@pytest.mark.parametrize(
    "parameters",
    [
        {"a": {"min": 1, "max": 3}},
        {"a": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25}},
        {"a": {"distribution": "int_uniform", "min": 2, "max": 5}, "b": {"value": 7}},
        {
            "a": {"values": [1, 2]},
            "b": {"min": 0, "max": 2},
            "c": {"distribution": "constant", "value": 1},
        },
        {"a": {"parameters": {"x": {"values": [1, 2, 3]}, "y": {"min": 1, "max": 2}}}},
    ],
)
def test_grid_run_count_matches_the_engines_enumeration(parameters):
    config = {"method": "grid", "parameters": parameters}
    assert run_count(config) == _engine_enumeration(config)
    assert run_count({**config, "run_cap": 2}) == 2


@pytest.mark.parametrize(
    ("sources", "name", "hydra_overrides", "expected"),
    [
        ([{"provider": "main", "schema": "file", "path": "/repo/conf"}], "train", [], []),
        (
            [
                {"provider": "command-line", "schema": "file", "path": "/u/conf"},
                {"provider": "main", "schema": "file", "path": "/repo/conf"},
                {"provider": "schema", "schema": "structured", "path": "structured://"},
            ],
            "mine",
            ["hydra/sweeper=wandb", "hydra.searchpath=[file:///x]", "hydra.verbose=true"],
            [
                "--config-dir=/u/conf",
                "--config-name=mine",
                "hydra.searchpath=[file:///x]",
                "hydra.verbose=true",
            ],
        ),
        (
            [{"provider": "main", "schema": "file", "path": "/elsewhere/conf"}],
            None,
            [],
            ["--config-path=/elsewhere/conf"],
        ),
    ],
)
def test_config_arguments_carry_the_users_configuration(sources, name, hydra_overrides, expected):
    from trainer.sweep.definition.command import config_arguments

    got = config_arguments(sources, name, hydra_overrides, default_conf="/repo/conf")
    assert got == expected


# The command line's Hydra settings: each reaches every trial, in order and as typed, but
# the sweep's own (its sweeper, launcher, mode, sweep dir; the run dir, which the agent sets).
TYPED_HYDRA = [
    "hydra/sweeper=wandb",
    "hydra/job_logging=disabled",
    "hydra.sweeper.run_cap=2",
    "+hydra.callbacks.mark._target_=marks.Mark",
    "hydra.launcher.n_jobs=2",
    "hydra.mode=MULTIRUN",
    "hydra.job.chdir=true",
    "hydra.sweep.dir=/s",
    "++hydra.sweeper.agents=2",
    "hydra.run.dir=/r",
    "hydra.output_subdir=null",
    "~hydra.sweep.subdir",
    "+hydra.job.env_set.FOO='a, b'",
    "hydra/launcher@hydra.launcher=basic",
    "+hydra/sweeper/sampler=tpe",
    "~hydra/hydra_logging",
    "hydra.sweeper_notes=x",
    "hydra.runtime_x=1",
    "hydra.searchpath=[file:///x]",
]
REACH_TRIALS = [
    "hydra/job_logging=disabled",
    "+hydra.callbacks.mark._target_=marks.Mark",
    "hydra.job.chdir=true",
    "hydra.output_subdir=null",
    "+hydra.job.env_set.FOO='a, b'",
    "~hydra/hydra_logging",
    "hydra.sweeper_notes=x",  # not under hydra.sweeper
    "hydra.runtime_x=1",
    "hydra.searchpath=[file:///x]",
]


def test_the_command_lines_hydra_settings_reach_trials_but_the_sweeps_own():
    from omegaconf import OmegaConf

    from trainer.sweep.definition.command import config_arguments, trial_hydra_overrides

    assert trial_hydra_overrides(TYPED_HYDRA) == REACH_TRIALS
    sources = [{"provider": "main", "schema": "file", "path": "/repo/conf"}]
    got = config_arguments(sources, "train", TYPED_HYDRA, default_conf="/repo/conf")
    assert got == REACH_TRIALS
    # hydra.overrides.hydra itself: read as typed, `${...}` left for the trial to resolve
    typed = OmegaConf.create(["hydra.job.name=${now:%H}", "hydra.mode=MULTIRUN"])
    assert trial_hydra_overrides(typed) == ["hydra.job.name=${now:%H}"]


def test_hydra_settings_reach_the_trial_argv_unchanged_through_sweep_yaml(tmp_path):
    import yaml

    from trainer.sweep.definition.command import (
        expand_trial_command,
        fixed_overrides,
        trial_hydra_overrides,
    )

    config = build_sweep_config(
        {"method": "grid"}, ["a=1,2", "b=x"], trial_hydra_overrides(TYPED_HYDRA)
    )
    assert fixed_overrides(config) == [*REACH_TRIALS, "b=x", "hydra.mode=RUN"]
    config = yaml.safe_load(yaml.safe_dump(config))  # sweep.yaml, read by `wandb agent`
    argv = expand_trial_command(config, {"a": 1}, tmp_path)
    assert argv[argv.index("trainer") + 1 :] == [
        *REACH_TRIALS, "a=1", "b=x", "hydra.mode=RUN", f"hydra.run.dir={tmp_path}",
    ]  # fmt: skip
    # one argv item each, no shell: the trial's Hydra reads the value the sweep's read
    env_set = OverridesParser.create().parse_override("+hydra.job.env_set.FOO='a, b'")
    assert env_set.value() == "a, b" and not env_set.is_sweep_override()
    # and the first trial composes with them in, as the sweep's checks compose it
    from tests.conftest import make_cfg

    trial = make_cfg(*REACH_TRIALS[:5], "hydra.mode=RUN")  # the ones of Hydra's schema
    assert trial.hydra.runtime.choices["hydra/job_logging"] == "disabled"
    assert trial.hydra.job.env_set.FOO == "a, b" and trial.hydra.output_subdir is None


def test_fixed_overrides_are_every_argument_after_the_entry_point():
    from trainer.sweep.definition.command import fixed_overrides

    command = trial_command(["a=1"], ["--config-dir=/u", "hydra.searchpath=[file:///x]"])
    assert fixed_overrides({"command": command}) == [
        "--config-dir=/u", "hydra.searchpath=[file:///x]", "a=1", "hydra.mode=RUN",
    ]  # fmt: skip
    wandb_default = ["${env}", "${interpreter}", "${program}", "${args}", "b=2"]
    assert fixed_overrides({"command": wandb_default}) == ["b=2"]


def test_params_that_are_not_a_mapping_are_named():
    with pytest.raises(TranslationError, match=r"hydra.sweeper.params='abc' must map Hydra keys"):
        build_sweep_config({"params": "abc"}, [])
