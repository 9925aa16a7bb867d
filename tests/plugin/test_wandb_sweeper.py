"""The `hydra/sweeper=wandb` plugin: discovery, conf/sweep definitions, dry run, and offline sweeps
run end to end through `python -m trainer -m`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from tests.conftest import CONF, make_cfg, run_cli
from trainer.config.schema import flatten
from trainer.sweep.definition.problems import sweep_problems
from trainer.sweep.definition.translate import build_sweep_config, run_count

SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
TINY = ["compile=off", "logger=none", "trainer.max_epochs=1"]
METRIC = "hydra.sweeper.metric={name: val/acc, goal: maximize}"


def test_hydra_discovers_the_sweeper():
    names = [cls.__name__ for cls in Plugins.instance().discover(Sweeper)]
    assert "WandbSweeper" in names


@pytest.mark.slow
def test_info_plugins_lists_it():
    result = run_cli("--info", "plugins")
    assert result.returncode == 0, result.stderr
    sweepers = result.stdout.split("Sweeper:")[1].split("Profiling")[0]
    assert "WandbSweeper" in sweepers


def test_the_ready_definitions_exist():
    assert {"lr_random", "lr_bayes", "compile_grid", "arch_random"} <= set(SWEEPS)


@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEPS)
def test_every_definition_is_a_valid_wandb_sweep(name):
    cfg = make_cfg(f"sweep={name}")
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert cfg.hydra.runtime.choices["hydra/sweeper"] == "wandb"
    options = OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    config = build_sweep_config(options, [f"sweep={name}"])
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra")
    groups = {g: [] for g in cfg.hydra.runtime.choices if not g.startswith("hydra/")}
    for group in groups:
        groups[group] = [p.stem for p in (CONF / group).glob("*.yaml")]
    assert sweep_problems(config, flatten(tree), groups) == []
    assert config["command"][-2:] == [f"sweep={name}", "hydra.mode=RUN"]
    assert run_count(config) != "unbounded"


@pytest.mark.slow
def test_dry_run_prints_the_config_and_run_count_and_runs_nothing(tmp_path):
    result = run_cli("sweep=compile_grid", "hydra.sweeper.dry_run=true", "trainer.seed=3")
    assert result.returncode == 0, result.stderr
    body, _, count = result.stdout.rpartition("# runs:")
    config = yaml.safe_load(body)
    assert config["method"] == "grid"
    assert config["parameters"]["model"] == {"values": ["small_cnn", "mobilenet_v3_small"]}
    assert "trainer.seed=3" in config["command"]
    assert count.strip() == "4"
    assert not (tmp_path / "outputs" / "sweeps").exists()


@pytest.mark.slow
def test_invalid_sweep_exits_2_with_every_problem_and_runs_nothing(tmp_path):
    result = run_cli(
        "sweep=lr_random", "optimizer.lrr=0.1,0.2", "hydra.sweeper.run_cap=0", "model=small_cnn,vgg"
    )
    assert result.returncode == 2
    assert "did you mean optimizer.lr?" in result.stderr
    assert "run_cap 0" in result.stderr
    assert "'vgg' is not an option of config group model" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
    # the agents it started before its checks (their templates importing) ended with it
    assert not _processes_of(tmp_path / "outputs")


def _processes_of(root: Path) -> list[int]:
    """PIDs of live processes started for the output root `root` (by their environment)."""
    marker = f"TRAINER_OUTPUT_DIR={root}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def _results(tmp_path: Path) -> tuple[Path, dict]:
    (directory,) = (tmp_path / "outputs" / "sweeps").iterdir()
    return directory, json.loads((directory / "results.json").read_text())


@pytest.mark.slow
def test_offline_grid_sweep_runs_every_point(tmp_path):
    result = run_cli(
        "-m", "hydra/sweeper=wandb", "hydra.sweeper.method=grid", METRIC, *TINY,
        "optimizer.lr=0.01,0.1", "optimizer.momentum=0.0,0.9",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    directory, results = _results(tmp_path)
    assert results["sweep_id"] == directory.name and results["backend"] == "local"
    assert sorted((r["params"]["optimizer.lr"], r["params"]["optimizer.momentum"]) for r in results["runs"]) == [
        (0.01, 0.0), (0.01, 0.9), (0.1, 0.0), (0.1, 0.9),
    ]  # fmt: skip
    assert all(r["state"] == "finished" and r["metric"] is not None for r in results["runs"])
    assert results["best"]["metric"] == max(r["metric"] for r in results["runs"])
    best = yaml.safe_load((directory / "best.yaml").read_text())
    assert f"optimizer.lr={results['best']['params']['optimizer.lr']}" in best
    assert yaml.safe_load((directory / "sweep.yaml").read_text())["method"] == "grid"


@pytest.mark.slow
def test_random_sweep_stops_at_run_cap(tmp_path):
    result = run_cli(
        "-m", "hydra/sweeper=wandb", "hydra.sweeper.method=random", "hydra.sweeper.run_cap=2",
        METRIC, *TINY, "trainer.max_steps=5", "optimizer.lr=tag(log,interval(1e-3,1e-1))",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    _, results = _results(tmp_path)
    assert len(results["runs"]) == 2
    lrs = [r["params"]["optimizer.lr"] for r in results["runs"]]
    assert all(1e-3 <= lr <= 1e-1 for lr in lrs) and lrs[0] != lrs[1]


@pytest.mark.slow
def test_bayes_sweep_of_a_few_runs(tmp_path):
    result = run_cli(
        "-m", "sweep=lr_bayes", "hydra.sweeper.run_cap=3", *TINY, "trainer.max_steps=5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    _, results = _results(tmp_path)
    assert len(results["runs"]) == 3
    assert all(r["state"] in ("finished", "stopped") for r in results["runs"])
    assert all(0.5 <= r["params"]["optimizer.momentum"] <= 0.99 for r in results["runs"])


def _exit_code(cli) -> int:
    """What an entry point exits with: its return value, or the code exit_on_error exits with."""
    try:
        return cli()
    except SystemExit as stop:
        return stop.code


@pytest.mark.slow
def test_unknown_sweep_id_is_one_clear_error_exit_2(tmp_path, capsys):
    from trainer.agent import main as agent_cli
    from trainer.sweep.__main__ import main as sweep_cli

    known = tmp_path / "outputs" / "sweeps" / "abc12345"
    known.mkdir(parents=True)
    (known / "sweep.db").touch()
    result = run_cli("sweep=lr_random", "hydra.sweeper.sweep_id=nope")
    assert result.returncode == 2
    assert "hydra.sweeper.sweep_id=nope" in result.stderr and "abc12345" in result.stderr
    assert "Traceback" not in result.stderr
    for cli in (lambda: agent_cli(["nope"]), lambda: sweep_cli(["show", "nope"])):
        assert _exit_code(cli) == 2
        err = capsys.readouterr().err
        assert "nope" in err and "abc12345" in err and "trainer.sweep ls" in err


def test_join_command_names_the_root_only_when_it_is_not_the_default(tmp_path, monkeypatch):
    from trainer.sweep.store.directory import join_command, output_root

    assert output_root() == tmp_path / "outputs"  # conftest sets TRAINER_OUTPUT_DIR
    # another terminal may not have $TRAINER_OUTPUT_DIR: the root it gave is named
    root = tmp_path / "outputs"
    assert join_command("abc", root) == f"python -m trainer.agent abc --root {root}"
    assert (
        join_command("abc", tmp_path / "x")
        == f"python -m trainer.agent abc --root {tmp_path / 'x'}"
    )
    monkeypatch.delenv("TRAINER_OUTPUT_DIR")
    monkeypatch.chdir(tmp_path)
    assert join_command("abc", tmp_path / "outputs") == "python -m trainer.agent abc"


@pytest.mark.slow
def test_agents_and_count_are_checked_before_anything_runs(tmp_path):
    result = run_cli("sweep=lr_random", "hydra.sweeper.agents=-1", "hydra.sweeper.count=0")
    assert result.returncode == 2
    assert "hydra.sweeper.agents=-1" in result.stderr and "hydra.sweeper.count=0" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
    from hydra_plugins.wandb_sweeper._impl import runner_problems
    from trainer.sweep.options import SweepOptions

    assert runner_problems(SweepOptions(backend="wandb", agents=0)) == []
    assert len(runner_problems(SweepOptions(backend="local", agents=0, count=2))) == 1


@pytest.mark.slow
def test_a_sweep_whose_agent_gave_up_exits_1(tmp_path):
    result = run_cli(
        "-m", "hydra/sweeper=wandb", "hydra.sweeper.method=grid", METRIC, "compile=off", "logger=none",
        "hydra.sweeper.max_consecutive_failures=1", "trainer.resume=/no/such/a.pt,/no/such/b.pt",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "1 consecutive runs failed" in result.stderr
    assert "1 of 1 agent(s)" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_invalid_fixed_overrides_are_refused_before_any_trial(tmp_path):
    result = run_cli("sweep=lr_random", "data.batch_size=-1", "hydra.sweeper.count=0")
    assert result.returncode == 2
    assert "data.batch_size" in result.stderr and "hydra.sweeper.count=0" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
    fine = run_cli("sweep=lr_random", "hydra.sweeper.dry_run=true")
    assert fine.returncode == 0, fine.stderr


@pytest.mark.slow
def test_device_keys_are_checked_before_anything_runs(tmp_path):
    result = run_cli(
        "sweep=lr_random",
        "hydra.sweeper.devices=[0,0]",
        "hydra.sweeper.trials_per_device=0",
        "hydra.sweeper.gpus_per_trial=2",
        "data.batch_size=33",
    )
    assert result.returncode == 2
    assert "hydra.sweeper.devices=[0, 0] names a GPU twice" in result.stderr
    assert "hydra.sweeper.trials_per_device=0 must be a positive integer" in result.stderr
    assert "data.batch_size=33 is the global batch" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()


@pytest.mark.slow
def test_a_multi_gpu_sweep_writes_the_torchrun_command(tmp_path):
    result = run_cli(
        "sweep=lr_random",
        "hydra.sweeper.devices=[0,1]",
        "hydra.sweeper.gpus_per_trial=2",
        "hydra.sweeper.dry_run=true",
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout.rpartition("# runs:")[0])
    assert config["command"][2:8] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "trainer"
    ]  # fmt: skip
    assert "trainer.strategy=ddp" in config["command"]


def _translated(name: str) -> dict:
    cfg = make_cfg(f"sweep={name}")
    return build_sweep_config(OmegaConf.to_container(cfg.hydra.sweeper, resolve=True), [])


def test_lr_params_is_lr_random_in_hydras_sweeper_spelling():
    params, parameters = _translated("lr_params"), _translated("lr_random")
    assert make_cfg("sweep=lr_params").hydra.sweeper.params["optimizer.lr"].startswith("tag(log")
    assert {k: v for k, v in params.items() if k != "command"} == {
        k: v for k, v in parameters.items() if k != "command"
    }


@pytest.mark.slow
def test_a_sweep_written_in_hydras_params_spelling_runs(tmp_path):
    result = run_cli("sweep=lr_params", "hydra.sweeper.run_cap=2", *TINY, "trainer.max_steps=5")
    assert result.returncode == 0, result.stderr[-3000:]
    directory, results = _results(tmp_path)
    assert yaml.safe_load((directory / "sweep.yaml").read_text())["parameters"] == {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.3},
        "optimizer.weight_decay": {"values": [0.0, 5e-4]},
    }
    assert len(results["runs"]) == 2
    assert all(r["state"] == "finished" and r["metric"] is not None for r in results["runs"])
    for run in results["runs"]:
        assert 1e-3 <= run["params"]["optimizer.lr"] <= 0.3
        assert run["params"]["optimizer.weight_decay"] in (0.0, 5e-4)


BOTH = """# @package _global_
defaults:
  - override /hydra/sweeper: wandb
hydra:
  sweeper:
    method: random
    metric: {name: val/acc, goal: maximize}
    run_cap: 2
    params:
      optimizer.lr: tag(log, interval(1e-3, 0.3))
    parameters:
      optimizer.momentum: {distribution: uniform, min: 0.5, max: 0.99}
"""


@pytest.mark.slow
def test_both_spellings_in_one_definition_exit_2_naming_the_two_keys(tmp_path):
    conf = tmp_path / "my_conf"
    (conf / "sweep").mkdir(parents=True)
    (conf / "sweep" / "both.yaml").write_text(BOTH)
    result = run_cli("--config-dir", str(conf), "sweep=both", "hydra.sweeper.run_cap=0")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "hydra.sweeper.params and hydra.sweeper.parameters are both set" in result.stderr
    assert "run_cap 0" in result.stderr  # with every other problem, at once
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
