"""The contract with W&B's experimental sweep scheduler: exactly the names, signatures and
behaviours trainer/sweep/search/suggest/wandb_door.py uses, and that no other module of ours uses it.
A change in wandb breaks this file, not the product."""

from __future__ import annotations

import importlib
import inspect
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

# (module, attribute, the parameters we pass, by name and order)
USED = [
    ("wandb.sdk.sweeps", "SweepInfo", ["id", "name", "entity", "project", "config", "controller_run_name"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "make_optimizer", ["sweep"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Run", ["config", "state", "wandb_run_id"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "RunWithMetrics", ["config", "state", "wandb_run_id", "summary_metrics", "history_metrics"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "RunConfig.from_values", ["values"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.ask_n_runs", ["self", "n"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.tell_run", ["self", "run_id", "data"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.prune_runs", ["self", "run_ids", "runs"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.tell_existing_finished_run", ["self", "data"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.tell_existing_active_run", ["self", "data"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.should_terminate_sweep", ["self"]),
    ("wandb.sdk.sweeps.scheduler.optimizer", "Optimizer.route_library_logs", ["self", "handler"]),
    ("wandb.sdk.sweeps.scheduler.optuna", "sweep_parameter_to_distribution", ["parameter"]),
    ("wandb.sdk.sweeps.scheduler.optuna", "load_trial_constructor", ["source", "name"]),
    ("wandb.sdk.sweeps.scheduler.client", "load_optimizer_config", ["source", "name", "optimizer_class", "sweep"]),
    ("wandb.sdk.sweeps.scheduler.client", "load_source_object", ["source", "name"]),
    ("wandb", "termwarn", ["string", "newline", "repeat", "prefix"]),  # how its mapping notes
]  # fmt: skip


def _resolve(module: str, dotted: str):
    found = importlib.import_module(module)
    for part in dotted.split("."):
        found = getattr(found, part)
    return found


@pytest.mark.parametrize(("module", "name", "parameters"), USED)
def test_each_name_we_use_exists_with_the_parameters_we_pass(module, name, parameters):
    assert list(inspect.signature(_resolve(module, name)).parameters) == parameters


def test_ax_mapping_signature_when_ax_is_installed():
    if os.environ.get("TRAINER_REQUIRE_AX") != "1":  # .ci/run sets it where [ax] is installed
        pytest.importorskip("ax", reason="Ax is the optional extra [ax]")
    mapping = _resolve("wandb.sdk.sweeps.scheduler.ax", "sweep_parameter_to_parameter")
    assert list(inspect.signature(mapping).parameters) == ["name", "parameter"]


def test_run_states_we_map_to_exist():
    from wandb.sdk.sweeps import RunState

    from trainer.sweep.search.suggest import wandb_door
    from trainer.sweep.store.database import TERMINAL

    for state in ("queued", "running", *TERMINAL):
        assert isinstance(wandb_door.run_state(state), RunState)
    assert wandb_door.run_state("finished") == RunState.FINISHED
    assert wandb_door.run_state("pruned") == RunState.KILLED


def test_the_cli_takes_the_sweep_scheduler_options_we_pass():
    from wandb.cli.cli import cli

    from trainer.sweep.search.suggest.wandb_door import scheduler_command

    command = cli.commands["sweep-scheduler"]
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    argv = scheduler_command("team/proj/abc", 3)
    assert argv[1:4] == ["-m", "wandb", "sweep-scheduler"]
    assert {a for a in argv if a.startswith("--")} <= options
    assert [p.name for p in command.params if p.param_type_name == "argument"] == ["sweep_id"]


def test_optuna_refuses_the_distributions_w_and_b_says_it_refuses():
    from wandb.sdk.sweeps.scheduler.optuna import sweep_parameter_to_distribution

    for spec in (
        {"distribution": "normal", "mu": 0, "sigma": 1},
        {"distribution": "beta", "a": 2, "b": 2},
        {"distribution": "inv_log_uniform", "min": 0, "max": 1},
    ):
        with pytest.raises(ValueError, match="has no optuna equivalent"):
            sweep_parameter_to_distribution(spec)


def test_an_optuna_optimizer_asks_tells_prunes_and_rebuilds_in_our_terms(tmp_path):
    """The session round trip: suggestions are flat plain values; a told result reaches the
    study; a fresh optimizer learns finished runs and adopts running ones."""
    import logging

    from trainer.sweep.search.suggest.wandb_door import OptimizerSession, TrialView

    config = {
        "method": "custom",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1}},
        "scheduler": {"engine": "optuna"},
    }  # fmt: skip
    log = logging.getLogger("test.contract")
    session = OptimizerSession(config, "s1", log)
    (first, params), (second, other) = session.ask(2)
    assert set(params) == {"optimizer.lr"} and type(params["optimizer.lr"]) is float
    history = [{"val/acc": 0.5}, {"val/acc": 0.7}]
    session.tell(first, TrialView("r1", params, "finished", history))
    assert session.prune([(second, TrialView("r2", other, "running", history[:1]))]) == []
    study = session._optimizer.study
    assert [t.value for t in study.trials if t.state.name == "COMPLETE"] == [0.7]
    session.close()
    rebuilt = OptimizerSession(config, "s1", log)
    rebuilt.tell_finished(TrialView("r1", params, "finished", history))
    assert rebuilt.adopt(TrialView("r2", other, "running")) is not None
    assert [t.params for t in rebuilt._optimizer.study.trials] == [params, other]
    rebuilt.close()


def test_no_other_module_uses_the_scheduler():
    uses = re.compile(r"wandb\.sdk\.sweeps|\"sweep-scheduler\"")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src").rglob("*.py")
        if uses.search(path.read_text()) and path.name != "wandb_door.py"
    ]
    assert offenders == []
    assert Path(ROOT / "src/trainer/sweep/search/suggest/wandb_door.py").is_file()
