"""The W&B server path, tested at its contract (these machines cannot reach W&B): the config
`wandb.sweep` receives, a trial launched exactly as `wandb agent` launches it, the SIGTERM of a
stop command, and the error without credentials or network."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from wandb.sdk.launch.sweeps import utils as sweep_utils
from wandb.sdk.lib import config_util

from tests.conftest import ROOT, make_cfg
from tests.wandb_records import records, run_config
from trainer.sweep import server
from trainer.sweep.definition.problems import schema_problems
from trainer.sweep.definition.translate import build_sweep_config
from trainer.sweep.options import SweepOptions

SWEEP_ID = "abc12345"
PARAMS = {
    "optimizer.lr": 1e-05,
    "optimizer.nesterov": True,
    "trainer.max_steps": 3,
    "trainer.grad_clip": None,
    "data.root": "a, b=c 'q'",  # unused by the digits data set: a string that must arrive exactly
    "model": "small_cnn",
}


@pytest.fixture
def local_server(monkeypatch):
    """A listening socket standing in for the W&B host (the probe only connects), and a key."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    yield
    server.close()


def test_config_handed_to_wandb_sweep_is_valid_and_is_sweep_yaml(
    local_server, monkeypatch, tmp_path
):
    import wandb

    calls = []

    def fake_sweep(config, project=None, entity=None):
        calls.append((config, project, entity))
        return SWEEP_ID

    monkeypatch.setattr(wandb, "sweep", fake_sweep)
    cfg = make_cfg("sweep=lr_bayes")
    config = build_sweep_config(
        OmegaConf.to_container(cfg.hydra.sweeper), ["sweep=lr_bayes", "x=1"]
    )
    result = server.run_server_sweep(
        config,
        SweepOptions(project="proj", entity="team", sweep_id=None, agents=0, count=None),
        root=tmp_path,
    )
    ((handed, project, entity),) = calls
    assert (project, entity) == ("proj", "team")
    assert schema_problems(handed) == []
    assert yaml.safe_load((tmp_path / "sweeps" / SWEEP_ID / "sweep.yaml").read_text()) == handed
    assert result["path"] == f"team/proj/{SWEEP_ID}"


def test_agent_command_mirrors_wandb_agent():
    assert server.agent_command("e/p/s", 3)[-4:] == ["agent", "--count", "3", "e/p/s"]
    assert server.agent_command("e/p/s", None)[-2:] == ["agent", "e/p/s"]
    forwarding = server.agent_command("e/p/s", None, forward_signals=True)  # a launcher's job
    assert forwarding[-3:] == ["agent", "--forward-signals", "e/p/s"]


def test_each_trial_runs_in_a_directory_of_its_w_and_b_run_and_resumes_there(tmp_path):
    command = _command("compile=off")
    assert server.resumable_trial_command(command, None) == [
        *command,
        "hydra.run.dir=${paths.output_dir}/sweeps/${oc.env:WANDB_SWEEP_ID}/runs/${oc.env:WANDB_RUN_ID}",
        "trainer.resume=auto",
    ]
    assert server.resumable_trial_command(command, tmp_path)[-2] == (
        f"hydra.run.dir={tmp_path}/runs/${{oc.env:WANDB_RUN_ID}}"
    )


def _as_wandb_agent(tmp_path: Path, command: list[str], params: dict, run_id: str):
    """argv and env exactly as `wandb agent` builds them (wandb_agent.Agent._command_run)."""
    args = {k: {"value": v} for k, v in params.items()}
    param_path = tmp_path / "wandb" / f"sweep-{SWEEP_ID}" / f"config-{run_id}.yaml"
    config_util.save_config_file_from_dict(str(param_path), args)
    sweep_vars = sweep_utils.create_sweep_command_args({"args": args})
    sweep_vars.update(interpreter=["python"], program=[None], env=["/usr/bin/env"])
    argv = []
    for chunk in sweep_utils.create_sweep_command(list(command)):
        chunk = str(chunk)
        if chunk.startswith("${") and chunk.endswith("}"):
            argv += sweep_vars.get(chunk[2:-1]) or []
        else:
            argv.append(chunk)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "WANDB_SWEEP_ID": SWEEP_ID,
        "WANDB_RUN_ID": run_id,
        "WANDB_SWEEP_PARAM_PATH": str(param_path),
        "WANDB_DIR": str(tmp_path / "wandb"),
        "WANDB_MODE": "offline",
    }
    return argv, env


def _command(*fixed: str) -> list[str]:
    return build_sweep_config({"method": "random", "parameters": {}}, list(fixed))["command"]


@pytest.mark.slow
def test_a_trial_launched_like_wandb_agent_trains_with_the_suggested_values(tmp_path):
    command = _command("compile=off", "logger=wandb", "trainer.max_epochs=1")
    argv, env = _as_wandb_agent(tmp_path, command, PARAMS, "run00001")
    result = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (hydra_cfg,) = (tmp_path / "outputs" / "runs").glob("*/*/.hydra/config.yaml")
    cfg = OmegaConf.load(hydra_cfg)
    assert cfg.optimizer.lr == 1e-05 and isinstance(cfg.optimizer.lr, float)
    assert cfg.optimizer.nesterov is True
    assert cfg.trainer.max_steps == 3 and cfg.trainer.grad_clip is None
    assert cfg.data.root == PARAMS["data.root"]
    assert cfg.model.name == "small_cnn"
    (wandb_file,) = (tmp_path / "wandb").rglob("run-run00001.wandb")
    logged = run_config(wandb_file)
    for key, value in PARAMS.items():
        assert logged[key] == value, key
    (run,) = [r.run for r in records(wandb_file) if r.WhichOneof("record_type") == "run"]
    assert run.run_group == SWEEP_ID


@pytest.mark.slow
def test_sigterm_of_a_stop_command_ends_the_trial_cleanly(tmp_path):
    command = _command("compile=off", "logger=none", "trainer.max_epochs=500")
    argv, env = _as_wandb_agent(tmp_path, command, {"optimizer.lr": 0.01}, "run00002")
    child = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not list((tmp_path / "outputs" / "runs").glob("*/*/metrics.jsonl")):
        assert child.poll() is None and time.monotonic() < deadline, "".join(output)[-3000:]
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)  # what wandb agent's proc.terminate() sends
    assert child.wait(timeout=120) == 128 + signal.SIGTERM, "".join(output)[-3000:]
    assert list((tmp_path / "outputs" / "runs").glob("*/*/checkpoints/last.pt"))


@pytest.mark.slow
def test_a_preempted_trial_marks_its_run_and_resumes_when_the_server_hands_it_out_again(
    tmp_path,
):
    fixed = ("compile=off", "logger=wandb", "model=small_cnn", "data=digits")
    command = server.resumable_trial_command(_command(*fixed, "trainer.max_epochs=40"), None)
    argv, env = _as_wandb_agent(tmp_path, command, {"optimizer.lr": 0.01}, "run00003")
    run_dir = tmp_path / "outputs" / "sweeps" / SWEEP_ID / "runs" / "run00003"
    child = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").is_file():
        assert child.poll() is None and time.monotonic() < deadline, run_dir / "train.log"
        time.sleep(0.2)
    child.send_signal(
        signal.SIGUSR2
    )  # SLURM's warning, as `wandb agent --forward-signals` passes it
    assert child.wait(timeout=120) == 128 + signal.SIGUSR2
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    (first,) = (tmp_path / "wandb").rglob("run-run00003.wandb")
    kinds = [r.WhichOneof("record_type") for r in records(first)]
    assert "preempting" in kinds  # the server requeues a preempted run of a sweep

    # The server hands the run out again: the same command and run id, on any agent.
    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "resumed from" in log and "last.pt in epoch" in log
    epochs = [
        json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert epochs == list(range(1, 41))  # every epoch once: nothing trained twice


def test_no_credentials_is_a_clear_error_within_seconds(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    started = time.monotonic()
    with pytest.raises(server.ServerUnavailable, match="wandb login"):
        server.preflight("https://api.wandb.ai")
    assert time.monotonic() - started < 5


def test_unreachable_server_is_a_clear_error_within_seconds(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(server.ServerUnavailable, match="cannot reach"):
        server.preflight(f"http://127.0.0.1:{port}")


def test_agents_are_wandb_agent_processes_logging_online(
    local_server, monkeypatch, tmp_path, capsys
):
    import wandb

    started = []

    class Process:
        def __init__(self, argv, env):
            started.append((argv, env))

        def wait(self):
            return 0

    monkeypatch.setattr(wandb, "sweep", lambda config, project=None, entity=None: SWEEP_ID)
    monkeypatch.setattr(server.subprocess, "Popen", Process)
    config = build_sweep_config(
        {"method": "random", "parameters": {"optimizer.lr": {"values": [0.1]}}}, []
    )
    result = server.run_server_sweep(
        config,
        SweepOptions(project="proj", entity="team", sweep_id=None, agents=2, count=3),
        root=tmp_path,
    )
    assert f"wandb agent team/proj/{SWEEP_ID}" in capsys.readouterr().out
    assert [argv[-4:] for argv, _ in started] == [
        ["agent", "--count", "3", f"team/proj/{SWEEP_ID}"]
    ] * 2
    assert all(env["WANDB_MODE"] == "online" for _, env in started)
    assert result["agent_exit_codes"] == [0, 0]


def test_one_wandb_agent_per_device_slot_with_its_gpus(local_server, monkeypatch, tmp_path, capsys):
    import wandb

    from trainer.sweep.agents.gpu_slots import DevicePlan

    started = []

    class Process:
        def __init__(self, argv, env):
            started.append(env)

        def wait(self):
            return 0

    monkeypatch.setattr(wandb, "sweep", lambda config, project=None, entity=None: SWEEP_ID)
    monkeypatch.setattr(server.subprocess, "Popen", Process)
    config = build_sweep_config(
        {"method": "random", "parameters": {"optimizer.lr": {"values": [0.1]}}}, []
    )
    plan = DevicePlan(("0", "1", "2"), trials_per_device=2)
    result = server.run_server_sweep(config, SweepOptions(project="p", entity="t", sweep_id=None, agents=None, count=None), root=tmp_path, devices=plan)  # fmt: skip
    assert [env["CUDA_VISIBLE_DEVICES"] for env in started] == ["0", "0", "1", "1", "2", "2"]
    out = capsys.readouterr().out
    for device in "012":  # the lines another machine like this one runs
        assert out.count(f"CUDA_VISIBLE_DEVICES={device} wandb agent t/p/{SWEEP_ID}") == 2
    assert result["agent_exit_codes"] == [0] * 6
