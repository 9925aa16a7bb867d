"""Local agents at scale, with real processes: parallel agents on one sweep, hyperband stops,
failure isolation, and resuming after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_commands import TRIAL
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.liveness import pid_alive

pytestmark = pytest.mark.slow  # every test here starts processes or compiles


def _config(method, parameters, tail, **extra):
    return {
        "method": method,
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": parameters,
        "command": [*TRIAL, *tail],
        **extra,
    }


def test_four_agents_on_an_eight_point_grid_run_each_point_once(tmp_path):
    config = _config(
        "grid",
        {"optimizer.lr": {"values": [0.01, 0.001]}, "trainer.seed": {"values": [0, 1, 2, 3]}},
        ["trainer.max_epochs=1", "trainer.max_steps=2"],
    )
    res = run_sweep(config, SweepOptions(agents=4), root=tmp_path)
    points = [(r["params"]["optimizer.lr"], r["params"]["trainer.seed"]) for r in res["runs"]]
    assert len(points) == 8 and len(set(points)) == 8
    assert all(r["state"] == "finished" for r in res["runs"])
    # Which agents ran them is timing: with 2-step trials the first agent whose template is
    # ready may run all eight before the others' are (seen under load). Each was claimed once.
    store = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db")
    assert all(r.agent_pid for r in store.runs()) and len(store.runs()) == 8


def test_hyperband_stops_a_clearly_worse_run_and_the_sweep_goes_on(tmp_path):
    config = _config(
        "grid",
        {"optimizer.lr": {"values": [0.01, 1e-9]}},
        ["trainer.max_epochs=8", "data.batch_size=128"],
        early_terminate={"type": "hyperband", "min_iter": 1, "eta": 3},
    )
    res = run_sweep(config, SweepOptions(agents=1), root=tmp_path)
    by_lr = {r["params"]["optimizer.lr"]: r for r in res["runs"]}
    assert by_lr[0.01]["state"] == "finished" and by_lr[0.01]["epochs"] == 8
    worse = by_lr[1e-9]
    assert worse["state"] == "stopped" and worse["exit_code"] == 143
    assert 1 <= worse["epochs"] < 8
    assert res["best"]["id"] == by_lr[0.01]["id"]


def test_failing_runs_are_recorded_and_the_agent_gives_up(tmp_path, capfd):
    config = _config(
        "grid",
        {"optimizer.lr": {"values": [1e12, 1e13, 0.01]}},
        ["optimizer=sgd", "trainer.max_epochs=1"],
    )
    res = run_sweep(config, SweepOptions(agents=1, max_consecutive_failures=2), root=tmp_path)
    err = capfd.readouterr().err
    assert res["agent_exit_codes"] == [1]
    assert [r["state"] for r in res["runs"]] == ["failed", "failed"]  # the third never ran
    store = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db")
    for r in store.runs():
        assert r.exit_code == 3 and "diverged" in r.log_tail
        assert r.id in err and r.log_path in err
    assert "2 consecutive runs failed" in err


SWEEPER = """
import sys
from trainer.sweep.local import run_sweep
from trainer.sweep.store.liveness import pid_alive
from trainer.sweep.options import SweepOptions
config = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"trainer.seed": {"values": [0, 1, 2, 3]}},
    "command": %r,
}
run_sweep(config, SweepOptions(agents=2), root=sys.argv[1])
"""


def test_kill_9_then_resume_loses_and_repeats_nothing(tmp_path):
    # trials of a few seconds: both are still running when the kill comes, however fast they start
    command = [*TRIAL, "trainer.max_epochs=12"]
    sweeper = subprocess.Popen(
        [sys.executable, "-c", SWEEPER % (command,), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    db = None
    while time.monotonic() < deadline:
        found = list((tmp_path / "sweeps").glob("*/sweep.db"))
        if found:
            db = found[0]
            running = [r for r in SweepStore(db).runs() if r.state == "running" and r.pid]
            if len(running) == 2:
                break
        time.sleep(0.2)
    assert db is not None, "the sweep never started"
    store = SweepStore(db)
    agents = {r.agent_pid for r in store.runs() if r.state == "running"}
    os.kill(sweeper.pid, signal.SIGKILL)
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    sweeper.wait()
    interrupted = {r.id for r in store.runs() if r.state == "running"}
    assert interrupted

    # Resumed by id: the runs lost with their agents go back to the sweep and resume in place
    # (same run ids, no rerun_crashed needed), each counted as one loss.
    res = run_sweep({}, SweepOptions(sweep_id=db.parent.name, agents=2), root=tmp_path)
    runs = store.runs()
    assert not any(r.superseded for r in runs) and len(runs) == 4
    assert sorted(r.params["trainer.seed"] for r in runs) == [0, 1, 2, 3]
    assert all(r.state == "finished" for r in runs)
    assert {r.id for r in runs if r.losses == 1} == interrupted
    assert len(res["runs"]) == 4


def _start_agent(tmp_path, name, config):
    directory = tmp_path / "sweeps" / name
    directory.mkdir(parents=True)
    store = SweepStore(directory / "sweep.db")
    store.set("config", config)
    agent = subprocess.Popen(
        [sys.executable, "-m", "trainer.agent", name, "--root", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the trial is training (an epoch logged)
        runs = store.runs()
        if runs and runs[0].history:
            break
        time.sleep(0.2)
    assert runs and runs[0].history, "the trial never logged an epoch"
    return agent, store


def test_a_killed_agents_trial_is_ended_when_the_sweep_resumes(tmp_path):
    config = _config("grid", {"trainer.seed": {"values": [0]}}, ["trainer.max_epochs=500"])
    agent, store = _start_agent(tmp_path, "orphan1", config)
    trial = store.runs()[0].pid
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    time.sleep(1.0)
    assert pid_alive(trial)  # its trial lives on (own session), as under `wandb agent`
    assert store.mark_lost_runs() == [store.runs()[0].id]
    deadline = time.monotonic() + 10
    while pid_alive(trial) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(trial)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_agent_stops_its_trial_gracefully_and_records_it(tmp_path, signum):
    config = _config("grid", {"trainer.seed": {"values": [0, 1]}}, ["trainer.max_epochs=200"])
    agent, store = _start_agent(tmp_path, "sigterm1", config)
    os.kill(agent.pid, signum)
    assert agent.wait(timeout=60) == 128 + signum
    runs = store.runs()
    assert len(runs) == 1  # no second trial was started
    run = runs[0]
    assert run.state == "crashed" and run.exit_code == 128 + signum
    assert (
        tmp_path / "sweeps" / "sigterm1" / "runs" / run.id / "checkpoints" / "last.pt"
    ).is_file()
    assert f"{signal.Signals(signum).name} received" in run.log_tail
