"""`python -m trainer.sweep pause | resume | stop | cancel SWEEP [RUN...]`: what each verb says,
and bad input refused in one paragraph, exit 2, with nothing in the store changed."""

from __future__ import annotations

import json

import pytest

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.sweep import agent_cli
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.agents import local_agent
from trainer.sweep.agents.launched import AgentJob
from trainer.sweep.agents.local_agent import LocalAgent
from trainer.sweep.local import _start, run_sweep
from trainer.sweep.options import AgentHooks, SweepOptions
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout

CONFIG = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"i": {"values": [0, 1, 2, 3]}},
}


@pytest.fixture
def sweep(tmp_path):
    """Sweep `s1` under tmp_path with one running run `r-one` and one finished `r-done`."""
    layout = SweepLayout.under(tmp_path, "s1")
    store = SweepStore(layout.db)
    store.set("config", CONFIG)
    store.set("sweep_id", "s1")
    store.set("state", "running")
    for run_id in ("r-one", "r-done"):
        store.claim(lambda runs: ({"i": len(runs)}, None), new_id=lambda i=run_id: i, agent_pid=1)
    store.update("r-done", state="finished")
    yield tmp_path, store
    store.close()


def _cli(root, *argv) -> int:
    try:
        return sweep_cli(["--root", str(root), *argv])
    except SystemExit as done:
        return int(done.code)


def _refused(capsys, root, store, *argv) -> str:
    before = (store.get("state"), store.get(steering.STEERED_KEY), store.runs())
    capsys.readouterr()
    assert _cli(root, *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1  # one paragraph
    assert (store.get("state"), store.get(steering.STEERED_KEY), store.runs()) == before
    return err


def test_every_agent_obeys_within_one_poll():
    """What the verbs promise ("within 2 s"): a waiting agent's poll and a run's heartbeat."""
    assert local_agent.PAUSED_POLL_S == local_agent.HEARTBEAT_S == steering.POLL_S == 2.0


def test_pause_then_resume_says_who_and_shows_everywhere(sweep, capsys):
    root, store = sweep
    assert _cli(root, "pause", "s1") == 0
    out = capsys.readouterr().out
    who = steering.who()
    assert f"sweep s1: paused by {who} at " in out and "r-one" in out and "resume s1" in out
    assert store.lifecycle()[0] == "paused"
    assert _cli(root, "ls") == 0
    listing = capsys.readouterr().out
    assert "paused" in listing and who.split("@")[0] in listing
    assert _cli(root, "show", "s1") == 0
    shown = capsys.readouterr().out
    assert f"sweep s1: paused by {who}" in shown
    res = json.loads(SweepLayout.under(root, "s1").results.read_text())
    assert res["state"] == "paused" and res["state_changed"]["by"] == who
    assert _cli(root, "resume", "s1", "--root", str(root)) == 0  # --root after the verb too
    assert "python -m trainer.agent s1" in capsys.readouterr().out
    assert store.lifecycle()[0] == "running"


def test_stop_one_run_and_the_sweep_goes_on(sweep, capsys):
    root, store = sweep
    assert _cli(root, "stop", "s1", "r-one") == 0
    assert "run r-one gets SIGTERM" in capsys.readouterr().out
    assert store.stop_requested("r-one") == 2 and store.lifecycle()[0] == "running"


def test_cancel_with_nothing_running_writes_the_report(sweep, capsys):
    root, store = sweep
    store.update("r-one", state="finished")
    assert _cli(root, "cancel", "s1") == 0
    assert "wrote " in capsys.readouterr().out
    res = json.loads(SweepLayout.under(root, "s1").results.read_text())
    assert res["state"] == "cancelled"


def test_an_unknown_sweep_is_refused_with_did_you_mean(sweep, capsys):
    root, store = sweep
    err = _refused(capsys, root, store, "pause", "s11")
    assert "did you mean s1?" in err


def test_an_unknown_run_is_refused_with_did_you_mean(sweep, capsys):
    root, store = sweep
    err = _refused(capsys, root, store, "stop", "s1", "r-onx")
    assert "did you mean r-one?" in err and "Nothing was stopped" in err


def test_stopping_a_run_that_ended_is_refused(sweep, capsys):
    root, store = sweep
    err = _refused(capsys, root, store, "stop", "s1", "r-one", "r-done")
    assert "r-done (finished) already ended" in err


def test_resuming_a_sweep_that_is_not_paused_is_refused(sweep, capsys):
    root, store = sweep
    err = _refused(capsys, root, store, "resume", "s1")
    assert "not paused" in err and "pause s1" in err


@pytest.mark.parametrize("verb", ["pause", "stop", "cancel"])
@pytest.mark.parametrize("ended", ["stop", "cancel"])
def test_steering_a_sweep_that_has_ended_is_refused(sweep, capsys, verb, ended):
    root, store = sweep
    assert _cli(root, ended, "s1") == 0
    err = _refused(capsys, root, store, verb, "s1")
    assert "the sweep has ended" in err and "show s1" in err


def test_a_finished_sweep_is_refused_too(sweep, capsys):
    root, store = sweep
    store.set("state", "finished")
    err = _refused(capsys, root, store, "pause", "s1")
    assert "has ended, finished" in err


def test_the_sweep_command_keeps_its_owners_pause(sweep, capsys):
    _, store = sweep
    store.steer("pause", "s1", "ada@node1")
    _start(store, "s1")
    assert store.lifecycle()[0] == "paused"
    assert "agents wait until python -m trainer.sweep resume s1" in capsys.readouterr().out


def test_agents_find_who_stopped_in_the_store(sweep):
    _, store = sweep
    store.steer("stop", "s1", "ada@node1", now=0.0)
    state, change = SweepStore(store.path).lifecycle()
    assert state == "stopped" and change.said() == "stopped by ada@node1 at 1970-01-01 00:00:00 UTC"


def test_an_agent_on_a_paused_sweep_waits_then_leaves_after_paused_wait(sweep, capsys, monkeypatch):
    root, store = sweep
    monkeypatch.setattr(local_agent, "PAUSED_POLL_S", 0.01)
    agent = LocalAgent(
        SweepLayout.under(root, "s1"),
        rerun_crashed=False,
        max_consecutive_failures=5,
        paused_wait_s=0.0,
    )
    store.steer("pause", "s1", "ada@node1")
    assert agent._obey_owner(0) == "wait"  # says so once, waits one poll
    assert "is paused by ada@node1" in capsys.readouterr().out
    assert agent._obey_owner(0) == "exit"  # waited paused_wait_s: a job leaves
    assert "python -m trainer.agent s1" in capsys.readouterr().out
    store.steer("stop", "s1", "ada@node1")
    agent.paused_wait_s, agent._paused_since = None, None
    assert agent._obey_owner(3) == "exit"
    assert "was stopped by ada@node1" in capsys.readouterr().out
    agent.engine.close()


def test_an_agent_in_a_slurm_job_waits_the_sweepers_default(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert agent_cli._paused_wait(None) is None and agent_cli._paused_wait(5.0) == 5.0
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    assert agent_cli._paused_wait(None) == RunnerConf.paused_wait_s


def test_the_sweep_command_tells_its_launcher_jobs_how_long_to_wait(tmp_path):
    started: list[AgentJob] = []

    def start_agents(jobs, _folder):
        started.extend(jobs)
        return [0] * len(jobs)

    options = SweepOptions(agents=1, paused_wait_s=42.0)
    run_sweep(CONFIG, options, root=tmp_path, hooks=AgentHooks(start_agents=start_agents))
    assert started[0].argv[-2:] == ["--paused-wait", "42.0"]
