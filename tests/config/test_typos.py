"""A typo'd key or group option on the command line, as a user types it: the project's one
paragraph and exit code 2 before Hydra composes, never Hydra's `+key=value` advice (fast: no
torch is imported on this path, about a second a process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from trainer.config.overrides import check_overrides
from trainer.config.schema import ConfigError


def _one_paragraph(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, proc.stderr
    out = proc.stderr + proc.stdout
    assert "Traceback" not in out and "To append to your config" not in out
    assert "HYDRA_FULL_ERROR" not in out
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0]
    return errors[0]


@pytest.mark.parametrize(
    "args, words",
    [
        (["trainer.max_epoch=1"], ["trainer.max_epoch", "Did you mean trainer.max_epochs?"]),
        (["model=resnet19"], ["model='resnet19'", "small_cnn", "Did you mean model=resnet18?"]),
        (
            ["sweep=lr_random", "trainer.max_epoch=1"],
            ["trainer.max_epoch", "Did you mean trainer.max_epochs?"],
        ),
    ],
)
def test_typo_is_our_paragraph_exit_2(args, words, tmp_path):
    proc = run_cli(*args, cwd=tmp_path, env={"TRAINER_OUTPUT_DIR": str(tmp_path)}, timeout=60)
    _one_paragraph(proc, *words)
    assert not any(tmp_path.iterdir())  # nothing ran, nothing was written


@pytest.mark.parametrize(
    "args, words",
    [
        (["max_epochs=1"], ["max_epochs is not a known setting", "trainer"]),
        (["-m", "optimizer.weight_decy=0,0.1"], ["optimizer.weight_decay"]),
        (["sweep=lr_random", "optimizer.weight_decy=0.1"], ["optimizer.weight_decay"]),
        (["-m", "model=small_cnn,resnet19"], ["model='resnet19'"]),
        (["sweep=lr_rando"], ["Did you mean sweep=lr_random?"]),
        (["sweep=lr_random", "hydra/launcher=joblb"], ["Did you mean hydra/launcher=joblib?"]),
        (["sweep=lr_random", "hydra/launcher=rq"], ["pip install hydra-rq-launcher"]),
    ],
)
def test_more_typos_in_process(args, words):
    with pytest.raises(ConfigError) as err:
        check_overrides(["trainer", *args])
    for word in words:
        assert word in str(err.value)


def test_a_swept_key_of_this_projects_sweep_is_left_to_its_sweeper():
    """`sweep=...` with a swept typo: the sweeper reports it with every other problem of the
    sweep at once (tests/plugin/test_wandb_sweeper.py), so the front door lets it through."""
    check_overrides(["trainer", "sweep=lr_random", "optimizer.weight_decy=0,0.1"])
    check_overrides(["trainer", "hydra/sweeper=wandb", "-m", "optimizer.lrr=0.1,0.2"])


@pytest.fixture
def user_conf(tmp_path):
    group = tmp_path / "my_conf" / "model"
    group.mkdir(parents=True)
    (group / "mine.yaml").write_text(
        "defaults:\n  - /model_schema@_here_\n  - _self_\nname: resnet18\n"
    )
    return tmp_path / "my_conf"


@pytest.mark.parametrize("how", ["--config-dir", "hydra.searchpath"])
def test_user_groups_count_as_options(how, user_conf, tmp_path):
    where = (
        ["--config-dir", str(user_conf)]
        if how == "--config-dir"
        else [f"hydra.searchpath=[file://{user_conf}]"]
    )
    proc = run_cli(*where, "model=mien", cwd=tmp_path, timeout=60)
    _one_paragraph(proc, "model='mien'", "mine", "Did you mean model=mine?")
    # The user's own option composes (`--cfg job` prints it).
    ok = run_cli(*where, "model=mine", "--cfg", "job", cwd=tmp_path, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "name: resnet18" in ok.stdout


@pytest.mark.parametrize(
    "override", ["+compile.options.epilogue_fusion=true", "hydra.job.name=mine", "model=null"]
)
def test_what_users_add_on_purpose_goes_to_hydra(override):
    check_overrides(["trainer", override])  # no ConfigError: Hydra (and validate) judge these


def test_evaluate_typo_is_our_paragraph(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.evaluate", "checkpoint=x.pt", "eval.step=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    _one_paragraph(proc, "eval.step", "Did you mean eval.steps?")
