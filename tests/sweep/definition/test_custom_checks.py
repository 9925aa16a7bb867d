"""What a sweep with a `scheduler:` block gets checked for before launch: the engine installed,
its `source` file and functions as W&B documents them, the parameters W&B's mapping refuses
(with W&B's reason and what to use instead), and a define-by-run space's keys."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from tests.conftest import CONF, run_cli
from trainer.sweep.definition.custom_checks import check, definition_dirs, resolve_source
from trainer.sweep.definition.problems import sweep_problems
from trainer.sweep.search import custom_method

KEYS = ["optimizer.lr", "optimizer.momentum", "optimizer.weight_decay", "trainer.max_epochs"]
GROUPS = {"optimizer": ["sgd", "adamw"], "model": ["small_cnn"]}
LR = {"distribution": "log_uniform_values", "min": 1e-4, "max": 1.0}
SOURCE = """
import optuna

def maximize(sweep):
    return optuna.create_study(direction="maximize")

def minimize(sweep):
    return optuna.create_study(direction="minimize")

def not_a_study(sweep):
    return 42

def space(trial):
    name = trial.suggest_categorical("optimizer", ["sgd", "adamw"])
    return {"optimizer": name, "optimizer.lr": trial.suggest_float("optimizer.lr", 1e-4, 1, log=True)}

def badly_named(trial):
    return {"optimizer.lr": trial.suggest_float("lr", 1e-4, 1, log=True)}

def unknown_key(trial):
    return {"optimizer.lrr": trial.suggest_float("optimizer.lrr", 1e-4, 1, log=True)}

def a_list(trial):
    return [1, 2]
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "studies.py"
    path.write_text(textwrap.dedent(SOURCE))
    return str(path)


def sweep(engine="optuna", parameters=None, **scheduler):
    return {
        "method": "custom",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"optimizer.lr": LR} if parameters is None else parameters,
        "scheduler": {"engine": engine, **scheduler},
    }


def problems(config, backend="local"):
    return check(config, KEYS, GROUPS, backend).problems


def test_a_valid_optuna_sweep_and_its_study_factory_pass(source):
    assert problems(sweep()) == []
    assert problems(sweep(source=source, optimizer="maximize")) == []


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        ({"source": "/no/such/file.py", "optimizer": "maximize"}, "no such file"),
        ({"optimizer": "nothing_here"}, "has no attribute 'nothing_here'"),
        ({"optimizer": "not_a_study"}, "returned int instead of optuna.Study"),
        ({"optimizer": "minimize"}, "do not match|does not match"),
        ({"search_space": "a_list"}, "returned list, not a dict"),
        ({"search_space": "badly_named"}, "trial.suggest_* names lr are not keys it returns"),
        ({"search_space": "unknown_key"}, "did you mean optimizer.lr?"),
    ],
)
def test_source_problems_are_found_before_launch(source, scheduler, expected):
    params = {} if "search_space" in scheduler else None
    found = problems(sweep(parameters=params, **{"source": source, **scheduler}))
    assert len(found) == 1 and any(e in found[0] for e in expected.split("|")), found


def test_a_define_by_run_space_gives_the_first_trial_its_sampled_values(source):
    config = sweep(parameters={}, source=source, search_space="space")
    config.pop("parameters")
    found = check(config, KEYS, GROUPS)
    assert found.problems == []
    view = found.trial_view(config)["parameters"]
    assert (
        set(view) == {"optimizer", "optimizer.lr"}
        and view["optimizer"]["value"] in GROUPS["optimizer"]
    )
    both = problems(sweep(source=source, search_space="space"))
    assert both and "not used when scheduler.search_space defines" in both[0]


@pytest.mark.parametrize(
    ("spec", "alternative"),
    [
        ({"distribution": "normal", "mu": 0.1, "sigma": 0.01}, "engine: wandb"),
        ({"distribution": "beta", "a": 2, "b": 2}, "engine: wandb"),
        ({"distribution": "inv_log_uniform", "min": 0.1, "max": 1}, "engine: wandb"),
        ({"distribution": "log_uniform", "min": -9.2103, "max": 0}, "min: 0.0001, max: 1"),
    ],
)
def test_refused_distributions_name_w_and_b_reason_and_the_alternative(spec, alternative):
    (problem,) = problems(sweep(parameters={"optimizer.lr": spec}))
    assert problem.startswith("parameter optimizer.lr: W&B's optuna mapping refuses it")
    assert "has no optuna equivalent" in problem and alternative in problem


def test_an_engine_that_is_not_installed_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        custom_method.importlib.util,
        "find_spec",
        lambda n, *a: None if n == "ax" else real(n, *a),
    )
    (problem,) = problems(sweep("ax"))
    assert 'pip install -e ".[ax]"' in problem and "engine: optuna" in problem


def test_engine_wandb_refuses_optuna_only_keys_and_needs_sweeps_on_the_server():
    config = {**sweep("wandb", optimizer="f", source="x.py"), "method": "bayes"}
    assert "engine wandb does not use it" in problems(config)[0]
    server = problems({**sweep("wandb"), "method": "bayes"}, backend="wandb")
    assert (importlib.util.find_spec("sweeps") is None) == any("sweeps==0.3.0" in p for p in server)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"scheduler": None}, "method: custom needs a scheduler block"),
        ({"early_terminate": {"type": "hyperband", "min_iter": 1}}, "`early_terminate` cannot"),
        ({"metric": None, "metrics": [{"name": "val/acc"}]}, "two or more objectives"),
        ({"metrics": [{"name": "val/acc"}, {"name": "val/loss"}]}, "cannot both be set"),
        (
            {"metric": None, "metrics": [{"name": "val/acc"}, {"name": "acc"}]},
            "metrics[1].name 'acc'",
        ),
    ],
)
def test_the_sweeps_own_problems(extra, expected):
    config = {k: v for k, v in {**sweep(), **extra}.items() if v is not None}
    found = sweep_problems(config, KEYS, GROUPS)
    assert len(found) == 1 and expected in found[0], found


def test_source_resolves_next_to_the_definition_then_in_the_working_directory(
    tmp_path, monkeypatch
):
    sources = [{"schema": "file", "path": str(CONF), "provider": "main"}]
    (folder,) = definition_dirs({"sweep": "tpe_optuna"}, sources)
    config = resolve_source(sweep(source="optuna_studies.py", optimizer="tpe_median"), [folder])
    assert config["scheduler"]["source"] == str(CONF / "sweep" / "optuna_studies.py")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("")
    assert resolve_source(sweep(source="mine.py"), [folder])["scheduler"]["source"] == str(
        tmp_path / "mine.py"
    )
    assert resolve_source(sweep(source="gone.py"), [folder])["scheduler"]["source"] == "gone.py"


@pytest.mark.slow
def test_a_bad_scheduler_sweep_exits_2_listing_every_problem_and_starts_nothing(tmp_path):
    result = run_cli(
        "sweep=tpe_optuna",
        "hydra.sweeper.scheduler.source=nope.py",
        "hydra.sweeper.early_terminate={type: hyperband, min_iter: 1}",
        "optimizer.weight_decay=tag(inv_log_uniform, interval(0.1, 1))",
    )
    assert result.returncode == 2, result.stderr
    assert "3 problem(s)" in result.stderr and "Traceback" not in result.stderr
    assert "(1) W&B schema: `early_terminate` cannot" in result.stderr
    assert "scheduler.source 'nope.py': no such file" in result.stderr
    assert "parameter optimizer.weight_decay: W&B's optuna mapping refuses it" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()


def test_what_w_and_b_changes_is_a_note_not_a_problem():
    spec = {"distribution": "q_log_uniform_values", "min": 0.1, "max": 1.0, "q": 0.5}
    found = check(sweep(parameters={"optimizer.lr": spec}), KEYS, GROUPS)
    assert found.problems == []
    (note,) = found.notes
    assert note.startswith("W&B's optuna mapping: ") and "q will be ignored" in note
