"""The conventions Hydra users bring to a sweep, run as real `python -m trainer -m` processes:
dotted metric overrides, hydra.sweep.dir, the user's own config dir/name/searchpath reaching every
trial, the dry run's sweep.yaml, and every fixed override checked before launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from trainer.agent import main as agent_cli
from trainer.sweep.__main__ import main as sweep_cli

pytestmark = pytest.mark.slow  # every test here starts processes or compiles

CHEAP = ["compile=off", "logger=none", "data=digits", "model=small_cnn"]
GRID = """# @package _global_
defaults:
  - override /hydra/sweeper: wandb
trainer:
  max_steps: 2
hydra:
  mode: MULTIRUN
  sweeper:
    method: grid
    metric: {name: val/acc, goal: maximize}
    parameters:
      optimizer.lr: {values: [0.01, 0.1]}
"""
MINE = """# A primary config of the user's own: the project's train config, shorter.
defaults:
  - train
  - _self_
trainer:
  max_epochs: 1
"""


def _user_conf(tmp_path: Path, sweep_dir: str | None = None) -> Path:
    conf = tmp_path / "my_conf"
    (conf / "sweep").mkdir(parents=True)
    text = GRID + (f"  sweep:\n    dir: {sweep_dir}\n" if sweep_dir else "")
    (conf / "sweep" / "mygrid.yaml").write_text(text)
    (conf / "mine.yaml").write_text(MINE)
    (tmp_path / "elsewhere").mkdir()
    return conf


def _dry_run(*args: str, cwd: Path | None = None) -> tuple[dict, str]:
    result = run_cli(*args, "hydra.sweeper.dry_run=true", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    body = result.stdout.rpartition("# runs:")[0]
    return yaml.safe_load(body), result.stdout


def test_metric_as_dotted_overrides_as_a_mapping_or_not_at_all():
    dotted, _ = _dry_run(
        "-m", "hydra/sweeper=wandb", "optimizer.lr=0.1,0.2",
        "hydra.sweeper.metric.name=val/acc", "hydra.sweeper.metric.goal=maximize",
    )  # fmt: skip
    assert dotted["metric"] == {"name": "val/acc", "goal": "maximize"}
    mapping, _ = _dry_run(
        "-m", "hydra/sweeper=wandb", "optimizer.lr=0.1,0.2",
        "hydra.sweeper.metric={name: val/loss, goal: minimize, target: 0.1}",
    )  # fmt: skip
    assert mapping["metric"] == {"name": "val/loss", "goal": "minimize", "target": 0.1}
    none, _ = _dry_run("-m", "hydra/sweeper=wandb", "optimizer.lr=0.1,0.2")
    assert "metric" not in none
    definition, _ = _dry_run("sweep=lr_bayes", "hydra.sweeper.metric.goal=minimize")
    assert definition["metric"] == {"name": "val/acc", "goal": "minimize"}


def test_dry_run_writes_sweep_yaml_into_the_sweep_dir_and_says_where(tmp_path):
    target = tmp_path / "planned"
    config, out = _dry_run("sweep=lr_random", f"hydra.sweep.dir={target}")
    assert yaml.safe_load((target / "sweep.yaml").read_text()) == config
    assert f"wandb sweep {target / 'sweep.yaml'}" in out
    assert not (target / "sweep.db").exists()  # nothing was created or run
    _, default_out = _dry_run("sweep=lr_random")
    written = Path(default_out.split("# written to ")[1].split(":")[0])
    assert written.is_file() and (tmp_path / "outputs") in written.parents


def test_a_user_config_dir_and_name_reach_every_trial_the_command_and_best_yaml(tmp_path):
    """A grid defined outside the repository, run from another working directory, with a
    relative --config-dir, the user's primary config, and hydra.sweep.dir set by the definition."""
    conf = _user_conf(tmp_path, sweep_dir="${paths.output_dir}/mygrid")
    result = run_cli(
        "--config-dir", "../my_conf", "--config-name", "mine", "sweep=mygrid", *CHEAP,
        cwd=tmp_path / "elsewhere",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    directory = tmp_path / "outputs" / "mygrid"
    results = json.loads((directory / "results.json").read_text())
    assert [r["state"] for r in results["runs"]] == ["finished", "finished"]
    assert all(r["epochs"] == 1 for r in results["runs"])  # mine.yaml composed every trial
    flags = [f"--config-dir={conf}", "--config-name=mine"]
    command = yaml.safe_load((directory / "sweep.yaml").read_text())["command"]
    assert command[2:6] == ["-m", "trainer", *flags]
    best = yaml.safe_load((directory / "best.yaml").read_text())
    assert best[:2] == flags and "sweep=mygrid" in best
    header = (directory / "best.yaml").read_text().splitlines()[0]
    assert f"python -m trainer {' '.join(flags)} " in header


def test_hydra_searchpath_reaches_the_trials(tmp_path):
    conf = _user_conf(tmp_path)
    result = run_cli(
        f"hydra.searchpath=[file://{conf}]", "sweep=mygrid", "hydra.sweeper.count=1", *CHEAP,
        "trainer.max_epochs=1", cwd=tmp_path / "elsewhere",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (directory,) = (tmp_path / "outputs" / "sweeps").iterdir()
    results = json.loads((directory / "results.json").read_text())
    assert [r["state"] for r in results["runs"]] == ["finished"]
    command = yaml.safe_load((directory / "sweep.yaml").read_text())["command"]
    assert f"hydra.searchpath=[file://{conf}]" in command


def test_hydra_sweep_dir_holds_the_sweep_and_the_id_or_directory_finds_it(tmp_path, capsys):
    target = tmp_path / "my_sweep"
    result = run_cli(
        "-m", "hydra/sweeper=wandb", "hydra.sweeper.method=grid", "optimizer.lr=0.05",
        "trainer.seed=0,1", "hydra.sweeper.metric.name=val/acc", "hydra.sweeper.metric.goal=maximize",
        f"hydra.sweep.dir={target}", *CHEAP, "trainer.max_epochs=1", "trainer.max_steps=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("sweep.db", "sweep.yaml", "results.json", "best.yaml", "runs", "logs", "params"):
        assert (target / name).exists(), name
    results = json.loads((target / "results.json").read_text())
    sweep_id = results["sweep_id"]
    assert all(str(target) in r["run_dir"] for r in results["runs"])
    assert f"python -m trainer.agent {sweep_id}" in result.stdout  # the id finds it
    assert not list((tmp_path / "outputs").glob("multiruns/*"))
    assert agent_cli([str(target)]) == 0  # join by directory: nothing left to run
    assert agent_cli([sweep_id]) == 0  # join by id
    assert "has no more runs" in capsys.readouterr().out
    assert sweep_cli(["ls"]) == 0
    listing = capsys.readouterr().out
    rows = [line for line in listing.splitlines() if line.startswith(f"│ {sweep_id} ")]
    assert len(rows) == 1 and f"{sweep_id} lives in {target}" in listing  # its dir, own line
    assert sweep_cli(["show", sweep_id]) == 0
    assert (target / "sweep.png").stat().st_size > 0
    assert sweep_cli(["show", str(target)]) == 0  # by directory
    assert f"sweep {sweep_id}" in capsys.readouterr().out
    again = run_cli("sweep=lr_random", f"hydra.sweep.dir={target}", *CHEAP)  # another search
    assert again.returncode == 2 and "method: was grid, now random" in again.stderr
    assert f"hydra.sweeper.warm_start={sweep_id}" in again.stderr


def test_a_bad_fixed_compile_mode_is_refused_before_anything_launches(tmp_path):
    result = run_cli(  # cheap trials, should the check miss it
        "sweep=lr_random", "compile.mode=fast", "logger=none", "trainer.max_steps=1",
        "trainer.max_epochs=1", "hydra.sweeper.run_cap=1",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "compile.mode" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
