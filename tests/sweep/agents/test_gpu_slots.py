"""GPUs for local sweep trials: which devices a sweep may use, how trials share or span them,
and that a device never runs more trials than allowed. On this CPU machine explicit indices are
handed out as CUDA_VISIBLE_DEVICES (trials then train on the CPU), so real agents and trials
check the assignment: overlap in time per device, packing, a killed trial freeing its device,
joining agents with disjoint --devices, and a two-process torchrun trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_commands import TRIAL
from trainer.sweep.agents import gpu_slots
from trainer.sweep.agents.gpu_slots import DevicePlan, DevicePool, fixed_slots, resolve, sweep_plan
from trainer.sweep.definition.command import fixed_overrides, trial_command
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.records import BUSY, RunRecord


@pytest.mark.parametrize(
    "option, env, count, expected",
    [
        ("auto", {}, 0, []),
        ("auto", {}, 2, ["0", "1"]),
        ("auto", {"CUDA_VISIBLE_DEVICES": "2,3"}, 2, ["2", "3"]),
        ([1], {"CUDA_VISIBLE_DEVICES": "2,3"}, 2, ["3"]),
        ([0, 1], {}, 0, ["0", "1"]),  # no GPU: indices are handed out as they are
        (None, {}, 2, []),
        ("auto", {"CUDA_VISIBLE_DEVICES": ""}, 0, []),
    ],
)
def test_devices_resolve_to_cuda_visible_devices_entries(option, env, count, expected):
    assert resolve(option, env, count) == expected


@pytest.mark.parametrize(
    "option, said",
    [
        ([2], "no GPU 2 here, this process sees 2 (cuda:0, cuda:1)"),
        ([0, 0], "names a GPU twice"),
        ("all", "must be auto, null (no GPU assignment) or a list"),
        ([-1], "must be auto"),
    ],
)
def test_bad_devices_name_the_key_and_the_fix(option, said):
    with pytest.raises(ValueError, match="hydra.sweeper.devices") as err:
        resolve(option, {}, 2)
    assert said in str(err.value)


@pytest.mark.parametrize(
    "options, said",
    [
        ({"devices": [0], "trials_per_device": 0}, "trials_per_device=0 must be a positive"),
        ({"devices": [0, 1], "trials_per_device": 2, "gpus_per_trial": 2}, "both above 1"),
        ({"devices": [0], "gpus_per_trial": 2}, "gpus_per_trial=2 needs that many devices"),
        ({"devices": None, "trials_per_device": 2}, "need devices"),
        ({"devices": [0, 1], "agents": 3}, "agents=3 is more than the 2 trial(s)"),
    ],
)
def test_device_plan_problems(options, said):
    plan, problems = sweep_plan(SweepOptions(**options))
    assert plan is None or problems
    assert any(said in p for p in problems), problems


def test_slots_follow_the_devices():
    assert sweep_plan(SweepOptions(**{"devices": [0, 1]}))[0].slots == 2
    assert sweep_plan(SweepOptions(**{"devices": [0, 1], "trials_per_device": 3}))[0].slots == 6
    assert sweep_plan(SweepOptions(**{"devices": [0, 1, 2, 3], "gpus_per_trial": 2}))[0].slots == 2
    assert gpu_slots.agent_count(None, sweep_plan(SweepOptions(**{"devices": [0, 1]}))[0]) == 2
    assert gpu_slots.agent_count(None, sweep_plan(SweepOptions(**{"devices": None}))[0]) == 1
    assert gpu_slots.agent_count(1, sweep_plan(SweepOptions(**{"devices": [0, 1]}))[0]) == 1
    assert fixed_slots(DevicePlan(("0", "1"), trials_per_device=2)) == [["0"], ["0"], ["1"], ["1"]]
    assert fixed_slots(DevicePlan(("0", "1", "2", "3"), gpus_per_trial=2)) == [
        ["0", "1"],
        ["2", "3"],
    ]


def _run(i, devices, params=None, state="running", pid=None):
    return RunRecord(
        id=f"r{i}",
        seq=i,
        state=state,
        params=params or {},
        agent_pid=pid or os.getpid(),
        host=DevicePool(DevicePlan()).host,
        devices=devices,
        started_at=float(i),
    )


@pytest.mark.slow
def test_the_pool_counts_running_trials_of_live_agents_and_prefers_a_warm_device():
    pool = DevicePool(DevicePlan(("0", "1"), trials_per_device=2))
    resnet, cnn = {"model": "resnet18"}, {"model": "small_cnn"}
    runs = [_run(1, ["0"], resnet, state="finished"), _run(2, ["1"], cnn, state="finished")]
    assert pool.choose(runs, cnn) == ["1"] and pool.choose(runs, resnet) == ["0"]
    runs.append(_run(3, ["1"], cnn))  # device 1 runs a trial: the idle device goes first
    assert pool.choose(runs, cnn) == ["0"]
    runs += [_run(4, ["0"]), _run(5, ["0"]), _run(6, ["1"])]
    assert pool.usage(runs) == {"0": 2, "1": 2} and not pool.available(runs)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    runs[-1] = _run(6, ["1"], pid=dead.pid)  # its agent died: the device is free again
    assert pool.choose(runs, None) == ["1"]


def test_a_multi_gpu_trial_takes_whole_devices():
    pool = DevicePool(DevicePlan(("0", "1", "2", "3"), gpus_per_trial=2))
    assert pool.choose([], None) == ["0", "1"]
    assert pool.choose([_run(1, ["0", "1"])], None) == ["2", "3"]
    assert pool.choose([_run(1, ["0", "1"]), _run(2, ["2"])], None) is None


def test_claim_hands_out_nothing_while_every_device_is_taken(tmp_path):
    store = SweepStore(tmp_path / "sweep.db")
    pool = DevicePool(DevicePlan(("0",)))
    ids = iter(["a", "b"])
    propose = lambda runs: ({"x": len(runs)}, None)  # noqa: E731
    first = store.claim(propose, new_id=lambda: next(ids), agent_pid=os.getpid(), pool=pool)
    assert first.devices == ["0"] and first.host == pool.host
    assert store.claim(propose, new_id=lambda: next(ids), agent_pid=os.getpid(), pool=pool) is BUSY
    store.update("a", state="finished")
    second = store.claim(propose, new_id=lambda: next(ids), agent_pid=os.getpid(), pool=pool)
    assert second.id == "b" and second.devices == ["0"]


def test_a_multi_gpu_trial_is_torchrun_with_ddp():
    command = trial_command(["compile=off"], [], gpus_per_trial=2)
    assert command[:8] == [
        "${env}",
        "${interpreter}",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "trainer",
    ]
    assert fixed_overrides({"command": command}) == [
        "trainer.strategy=ddp",
        "compile=off",
        "hydra.mode=RUN",
    ]


# --- real agents and trials ---------------------------------------------------------------


def _config(values, *tail):
    return {
        "method": "grid",
        "parameters": {"trainer.seed": {"values": list(values)}},
        "command": [*TRIAL, "trainer.max_epochs=1", *tail],
    }


def _overlaps(runs):
    """Per device, the most trials that ran on it at the same moment."""
    most = {}
    for device in {d for r in runs for d in r.devices or ()}:
        events = sorted(
            [(r.started_at, 1) for r in runs if device in r.devices]
            + [(r.ended_at, -1) for r in runs if device in r.devices]
        )
        now = peak = 0
        for _, step in events:
            now += step
            peak = max(peak, now)
        most[device] = peak
    return most


@pytest.mark.slow
def test_four_trials_on_two_devices_never_share_one(tmp_path, capfd):
    plan = DevicePlan(("0", "1"))
    res = run_sweep(
        _config(range(4), "trainer.max_steps=3"),
        SweepOptions(agents=2),
        root=tmp_path,
        devices=plan,
    )
    runs = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db").runs()
    assert [r.state for r in runs] == ["finished"] * 4
    assert _overlaps(runs) == {"0": 1, "1": 1}
    for run in runs:  # each trial got its device, and says so in its summary
        summary = json.loads(
            (tmp_path / "sweeps" / res["sweep_id"] / "runs" / run.id / "summary.json").read_text()
        )
        assert summary["cuda_visible_devices"] == run.devices[0] and summary["device"] == "cpu"
    assert all(r["devices"] in (["0"], ["1"]) for r in res["runs"])  # results.json has them
    out = capfd.readouterr().out
    assert out.count("agent: no GPU here: trials get CUDA_VISIBLE_DEVICES=0") == 2  # once each
    assert "trials start as new processes" not in out  # every trial forked from a template


@pytest.mark.slow
def test_two_trials_per_device_share_it_and_never_three(tmp_path):
    plan = DevicePlan(("0",), trials_per_device=2)
    res = run_sweep(
        _config(range(4), "trainer.max_steps=40"),
        SweepOptions(agents=2),
        root=tmp_path,
        devices=plan,
    )
    runs = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db").runs()
    assert all(r.state == "finished" and r.devices == ["0"] for r in runs)
    assert _overlaps(runs) == {"0": 2}


@pytest.mark.slow
def test_a_killed_trial_frees_its_device(tmp_path):
    directory = tmp_path / "sweeps" / "dev1"
    directory.mkdir(parents=True)
    store = SweepStore(directory / "sweep.db")
    store.set("config", _config([0, 1], "trainer.max_epochs=300"))
    store.set("devices", DevicePlan(("0",)).to_dict())
    agent = subprocess.Popen(
        [sys.executable, "-m", "trainer.agent", "dev1", "--root", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for seq in (1, 2):  # kill each trial once it trains: the next one gets device 0
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                runs = store.runs()
                if len(runs) == seq and runs[-1].history and runs[-1].pid:
                    break
                time.sleep(0.2)
            assert len(runs) == seq and runs[-1].devices == ["0"]
            os.kill(runs[-1].pid, signal.SIGKILL)
        assert agent.wait(timeout=60) == 0
    finally:
        agent.kill()
    runs = store.runs()
    assert [r.state for r in runs] == ["crashed", "crashed"]
    assert runs[0].ended_at <= runs[1].started_at


@pytest.mark.slow
def test_joining_agents_with_disjoint_devices_share_the_sweep(tmp_path):
    directory = tmp_path / "sweeps" / "dev2"
    directory.mkdir(parents=True)
    store = SweepStore(directory / "sweep.db")
    store.set("config", _config(range(4), "trainer.max_steps=3"))
    store.set("devices", DevicePlan(("0", "1")).to_dict())
    agents = {
        devices: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer.agent",
                "dev2",
                "--root",
                str(tmp_path),
                "--devices",
                devices,
                "--no-report",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for devices in ("0", "1")
    }
    assert [agent.wait(timeout=300) for agent in agents.values()] == [0, 0]
    runs = store.runs()
    assert len(runs) == 4 and all(r.state == "finished" for r in runs)
    by_agent = {}
    for run in runs:
        by_agent.setdefault(run.agent_pid, set()).update(run.devices)
    assert sorted(map(sorted, by_agent.values())) in ([["0"], ["1"]], [["0"]], [["1"]])
    assert _overlaps(runs) in ({"0": 1, "1": 1}, {"0": 1}, {"1": 1})


@pytest.mark.slow
def test_a_bad_devices_option_for_a_joining_agent_exits_2(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.agent",
            "nosuch",
            "--root",
            str(tmp_path),
            "--devices",
            "a,b",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--devices a,b: give GPU indices" in proc.stderr


@pytest.mark.slow
def test_a_two_gpu_trial_runs_through_torchrun(tmp_path):
    plan = DevicePlan(("0", "1"), gpus_per_trial=2)
    config = _config([0], "trainer.max_steps=2")
    config["command"] = trial_command(
        [*TRIAL[5:], "trainer.max_epochs=1", "trainer.max_steps=2"], [], 2
    )
    res = run_sweep(config, root=tmp_path, devices=plan)
    run = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db").runs()[0]
    assert run.state == "finished" and run.devices == ["0", "1"]
    log = (tmp_path / "sweeps" / res["sweep_id"] / "logs" / f"{run.id}.log").read_text()
    assert "-m torch.distributed.run --standalone --nproc_per_node=2 -m trainer" in log
    summary = json.loads(
        (tmp_path / "sweeps" / res["sweep_id"] / "runs" / run.id / "summary.json").read_text()
    )
    assert summary["world_size"] == 2 and summary["strategy"] == "ddp"
    assert summary["cuda_visible_devices"] == "0,1"


def test_overlaps_counts_concurrent_trials():
    runs = [_run(1, ["0"]), _run(2, ["0"]), _run(3, ["1"])]
    for run, (start, end) in zip(runs, [(0, 2), (1, 3), (0, 1)], strict=True):
        run.started_at, run.ended_at = start, end
    assert _overlaps(runs) == {"0": 2, "1": 1}
