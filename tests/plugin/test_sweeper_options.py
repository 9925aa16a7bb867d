"""The `hydra.sweeper.*` keys typed in the config Hydra validates, read once into the frozen
`SweepOptions` both backends take; every key spelt as the docs spell it on the command line (a
whole search space without `+`); a wrong type or a misspelt key said in the project's words
before Hydra composes."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from omegaconf import OmegaConf

from hydra_plugins.wandb_sweeper.config import WandbSweeperConf
from tests.conftest import make_cfg
from trainer.config.overrides import check_overrides
from trainer.config.rules import ConfigError
from trainer.sweep.definition.translate import build_sweep_config
from trainer.sweep.options import AgentHooks, SweepOptions

SPACE = "{optimizer.lr: {distribution: log_uniform_values, min: 0.001, max: 0.5}}"


def test_at_most_six_keys_are_untyped_and_they_are_the_free_blocks():
    """W&B's free blocks, the search space in Hydra's spelling, and the spellings of devices
    (auto, a list, null) and of warm_start (one sweep, or a list: Hydra takes no `a,b` for its
    own keys)."""
    hints = typing.get_type_hints(WandbSweeperConf)
    untyped = {name for name, hint in hints.items() if hint is typing.Any}
    assert untyped == {
        "parameters",
        "params",
        "scheduler",
        "early_terminate",
        "devices",
        "warm_start",
    }


def test_every_option_of_sweep_options_is_a_key_of_the_sweeper_with_its_default():
    conf = WandbSweeperConf()
    for field in dataclasses.fields(SweepOptions):
        assert getattr(conf, field.name) == field.default, field.name


def test_a_whole_search_space_on_the_command_line_needs_no_plus():
    cfg = make_cfg("hydra/sweeper=wandb", f"hydra.sweeper.parameters={SPACE}")
    parameters = OmegaConf.to_container(cfg.hydra.sweeper.parameters)
    assert parameters == {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 0.001, "max": 0.5}
    }
    cfg = make_cfg("sweep=lr_random", f"hydra.sweeper.parameters={SPACE}")  # merged into its own
    assert cfg.hydra.sweeper.parameters["optimizer.lr"]["min"] == 0.001
    hydra_spelling = "{optimizer.lr: 'tag(log, interval(0.001, 0.5))'}"
    cfg = make_cfg("hydra/sweeper=wandb", f"hydra.sweeper.params={hydra_spelling}")
    assert cfg.hydra.sweeper.params == {"optimizer.lr": "tag(log, interval(0.001, 0.5))"}
    cfg = make_cfg("sweep=lr_params", f"hydra.sweeper.params={hydra_spelling}")
    assert cfg.hydra.sweeper.params["optimizer.lr"] == "tag(log, interval(0.001, 0.5))"


def test_typed_keys_compose_and_multi_objective_metrics_keep_only_what_is_set():
    cfg = make_cfg("sweep=pareto_optuna", "hydra.sweeper.agents=2", "hydra.sweeper.sweep_id=123")
    sweeper = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    assert sweeper["agents"] == 2 and sweeper["sweep_id"] == "123"  # an id is text, digits or not
    config = build_sweep_config(sweeper, [])
    assert config["metrics"] == [
        {"name": "val/acc", "goal": "maximize"},
        {"name": "perf/step_ms", "goal": "minimize"},
    ]


@pytest.mark.parametrize(
    "override, said",
    [
        ("hydra.sweeper.agents=abc", "hydra.sweeper.agents=abc is refused"),
        ("hydra.sweeper.run_cap=lots", "give an integer"),
        ("hydra.sweeper.dry_run=maybe", "give true or false"),
        ("hydra.sweeper.agent=2", "Did you mean hydra.sweeper.agents?"),
        ("hydra.sweeper.metric.nam=val/acc", "Did you mean hydra.sweeper.metric.name?"),
    ],
)
def test_a_wrong_sweeper_value_or_key_is_the_projects_error_before_hydra(override, said):
    with pytest.raises(ConfigError, match=said.replace("?", r"\?")):
        check_overrides(["trainer", "-m", "sweep=lr_random", override])


def test_right_sweeper_values_pass_the_front_door():
    check_overrides(
        [
            "trainer",
            "-m",
            "hydra/sweeper=wandb",
            "hydra.sweeper.agents=2",
            "hydra.sweeper.devices=[0,1]",
            "hydra.sweeper.storage=null",
            "hydra.sweeper.metric.name=val/acc",
            f"hydra.sweeper.parameters={SPACE}",
        ]
    )


def test_sweep_options_are_read_once_and_frozen():
    sweeper = {"agents": 2, "method": "grid", "parameters": {}, "project": None}
    options = SweepOptions.of(sweeper, {"project": "from-logger", "entity": None})
    assert (options.agents, options.project, options.entity) == (2, "from-logger", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.agents = 3  # type: ignore[misc]
    assert SweepOptions.of({"project": "mine"}, {"project": "theirs"}).project == "mine"
    assert AgentHooks() == AgentHooks(None, None)


def test_sweep_options_say_every_problem_of_how_a_sweep_runs():
    problems = SweepOptions(backend="cloud", agents=0, count=0, max_retries=-1).problems()
    assert len(problems) == 4
    assert SweepOptions(backend="wandb", agents=0).problems() == []


def test_two_ways_of_running_at_once_are_the_projects_error_not_a_traceback():
    with pytest.raises(ConfigError, match="-m/--multirun and --cfg cannot go together"):
        check_overrides(["trainer", "-m", "--cfg", "hydra", "hydra/sweeper=wandb"])
    check_overrides(["trainer", "--cfg", "hydra", "hydra/sweeper=wandb"])  # one is fine
