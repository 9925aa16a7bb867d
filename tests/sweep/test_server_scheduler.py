"""`backend=wandb` with a `scheduler:` block, at its contract (these machines cannot reach W&B):
the sweep is created with the block, `wandb sweep-scheduler` starts beside the agents (online,
before them) and stops after them, both lines are printed, and no credentials fail fast."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from tests.sweep.test_server import SWEEP_ID, local_server  # noqa: F401  (the fixture)
from trainer.sweep import server
from trainer.sweep.definition.translate import build_sweep_config
from trainer.sweep.options import SweepOptions

OPTUNA = {
    "method": "custom",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "scheduler": {"engine": "optuna"},
    "parameters": {"optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1}},
}
PATH = f"team/proj/{SWEEP_ID}"


class Recorder:
    """subprocess.Popen standing in for the scheduler and agent processes."""

    started: list = []

    def __init__(self, argv, env):
        self.argv, self.env, self.signals, self.done = argv, env, [], False
        Recorder.started.append(self)

    def poll(self):
        return 0 if self.done else None

    def send_signal(self, signum):
        self.signals.append(signum)
        self.done = True

    def wait(self, timeout=None):
        self.done = True
        return 0

    def kill(self):
        self.done = True


@pytest.fixture
def recorded(monkeypatch):
    import wandb

    created = []
    Recorder.started = []
    monkeypatch.setattr(
        wandb, "sweep", lambda config, project=None, entity=None: created.append(config) or SWEEP_ID
    )
    monkeypatch.setattr(server.subprocess, "Popen", Recorder)
    return created


def test_the_scheduler_starts_before_the_agents_and_stops_after_them(
    local_server,  # noqa: F811
    recorded,
    tmp_path,
    capsys,
):
    config = build_sweep_config(OPTUNA, [])
    result = server.run_server_sweep(
        config,
        SweepOptions(project="proj", entity="team", sweep_id=None, agents=2, count=None),
        root=tmp_path,
    )
    created = {**config, "command": server.resumable_trial_command(config["command"], None)}
    assert recorded == [created] and recorded[0]["scheduler"] == {"engine": "optuna"}
    scheduler, *agents = Recorder.started
    assert scheduler.argv == [
        sys.executable, "-m", "wandb", "sweep-scheduler", "--batch-size", "2", PATH,
    ]  # fmt: skip
    assert scheduler.env["WANDB_MODE"] == "online"
    assert [a.argv[-2:] for a in agents] == [["agent", PATH]] * 2
    assert scheduler.signals == [signal.SIGINT]  # asked to finish its step once agents ended
    out = capsys.readouterr().out
    assert f"wandb agent {PATH}" in out and f"wandb sweep-scheduler --batch-size 2 {PATH}" in out
    assert result["scheduler_exit_code"] == 0 and result["agent_exit_codes"] == [0, 0]


def test_agents_0_creates_the_sweep_and_prints_both_lines_only(
    local_server,  # noqa: F811
    recorded,
    tmp_path,
    capsys,
):
    config = build_sweep_config(OPTUNA, [])
    server.run_server_sweep(
        config,
        SweepOptions(project="proj", entity="team", sweep_id=None, agents=0, count=None),
        root=tmp_path,
    )
    assert Recorder.started == []
    out = capsys.readouterr().out
    assert f"wandb agent {PATH}" in out and "wandb sweep-scheduler" in out


def test_a_sweep_without_scheduler_starts_no_scheduler(local_server, recorded, tmp_path):  # noqa: F811
    config = build_sweep_config({"method": "random", "parameters": OPTUNA["parameters"]}, [])
    server.run_server_sweep(
        config,
        SweepOptions(project="proj", entity="team", sweep_id=None, agents=1, count=None),
        root=tmp_path,
    )
    assert [p.argv[3] for p in Recorder.started] == ["agent"]


def test_without_credentials_it_fails_in_seconds_and_starts_nothing(
    recorded, tmp_path, monkeypatch
):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    started = time.monotonic()
    with pytest.raises(server.ServerUnavailable, match="wandb login"):
        server.run_server_sweep(build_sweep_config(OPTUNA, []), SweepOptions(project="proj", entity="team", sweep_id=None, agents=1, count=None), root=tmp_path)  # fmt: skip
    assert time.monotonic() - started < 5
    assert recorded == [] and Recorder.started == []


def test_joining_a_sweep_starts_agents_but_no_second_scheduler(
    local_server,  # noqa: F811
    recorded,
    tmp_path,
    capsys,
):
    server.run_server_sweep(build_sweep_config(OPTUNA, []), SweepOptions(project="proj", entity="team", sweep_id=SWEEP_ID, agents=1, count=None), root=tmp_path)  # fmt: skip
    assert recorded == []  # nothing created
    assert [p.argv[3] for p in Recorder.started] == ["agent"]
    assert "wandb sweep-scheduler" in capsys.readouterr().out
