"""The CPU share with real processes: concurrent trials split the cores, cpus_per_trial is
honoured and checked, trainer.num_threads sizes one run, a joining agent avoids held cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.sweep_commands import TRIAL
from trainer.sweep.agents import cpu_share, cpu_slots
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore

TINY = ["trainer.max_epochs=1", "trainer.max_steps=3"]
METRIC = "hydra.sweeper.metric={name: val/acc, goal: maximize}"
two_cores = pytest.mark.skipif(
    cpu_share.process_limits().count < 2, reason="disjoint shares need two CPUs"
)


def _cpu(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())["cpu"]


@pytest.mark.slow
@two_cores
def test_two_concurrent_trials_each_get_half_the_cpus_on_their_own_cores(tmp_path):
    limits = cpu_share.process_limits()
    config = {
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"trainer.seed": {"values": [0, 1, 2, 3]}},
        # a few seconds each, so the agents' first trials overlap however fast trials start
        "command": [*TRIAL, "trainer.max_epochs=12"],
    }
    res = run_sweep(config, SweepOptions(agents=2, count=2), root=tmp_path)  # two trials per agent
    assert [r["state"] for r in res["runs"]] == ["finished"] * 4
    store = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db")
    runs = store.runs()
    by_agent: dict[int, list] = {}
    for run in runs:
        by_agent.setdefault(run.agent_pid, []).append(run)
    assert len(by_agent) == 2
    expected = max(1, limits.count // 2)  # 1 on a 2-core machine
    affinities = []
    for agent_runs in by_agent.values():
        cpus = [_cpu(r.run_dir) for r in agent_runs]
        assert all(c["threads"] == expected and c["interop_threads"] == expected for c in cpus)
        assert all(c["budget"] == expected and c["source"] == "agent share" for c in cpus)
        assert len({tuple(c["affinity"]) for c in cpus}) == 1  # an agent keeps its cores
        affinities.append(set(cpus[0]["affinity"]))
    first, second = affinities
    assert len(first) == len(second) == expected and not first & second  # disjoint
    (a, b) = (sorted(rs, key=lambda r: r.started_at)[0] for rs in by_agent.values())
    assert a.started_at < b.ended_at and b.started_at < a.ended_at  # they ran at the same time
    with store.reading() as db:  # both agents freed their slots
        assert not db.exec_driver_sql("SELECT COUNT(*) FROM agent_slots").scalar()


@pytest.mark.slow
def test_cpus_per_trial_is_honoured(tmp_path):
    result = run_cli(
        "-m",
        "hydra/sweeper=wandb",
        "hydra.sweeper.method=grid",
        METRIC,
        "compile=off",
        "logger=none",
        *TINY,
        "optimizer.lr=choice(0.01)",
        "hydra.sweeper.cpus_per_trial=1",
    )  # fmt: skip  (one agent: the automatic share would be every CPU)
    assert result.returncode == 0, result.stderr[-3000:]
    (directory,) = (tmp_path / "outputs" / "sweeps").iterdir()
    (run,) = SweepStore(directory / "sweep.db").runs()
    cpu = _cpu(run.run_dir)
    assert cpu["threads"] == 1 and cpu["budget"] == 1 and len(cpu["affinity"]) == 1


@pytest.mark.slow
def test_cpus_per_trial_beyond_this_process_is_exit_2_before_anything_runs(tmp_path):
    too_many = cpu_share.process_limits().count + 1
    result = run_cli("sweep=lr_random", f"hydra.sweeper.cpus_per_trial={too_many}")
    assert result.returncode == 2
    assert f"hydra.sweeper.cpus_per_trial={too_many} is more CPUs than" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()
    result = run_cli("sweep=lr_random", "hydra.sweeper.cpus_per_trial=0")
    assert result.returncode == 2 and "hydra.sweeper.cpus_per_trial=0 must be" in result.stderr


def test_the_joining_agents_cpus_per_trial_is_checked(capsys):
    from trainer.agent import main as agent_cli

    too_many = cpu_share.process_limits().count + 1
    with pytest.raises(SystemExit) as stopped:  # the entry point's one error handler
        agent_cli(["anysweep", "--cpus-per-trial", str(too_many)])
    assert stopped.value.code == 2
    assert f"--cpus-per-trial={too_many} is more CPUs than" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_with_num_threads_1_uses_one_thread(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "compile=off", "logger=none", *TINY, "trainer.num_threads=1", f"hydra.run.dir={run_dir}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cpu = _cpu(run_dir)
    assert cpu["threads"] == 1 and cpu["interop_threads"] == 1
    assert cpu["source"] == "trainer.num_threads" and cpu["dataloader_workers"] == 0
    assert set(cpu["affinity"]) == os.sched_getaffinity(0)


@pytest.mark.slow
def test_a_joining_agent_waits_for_cores_the_sweep_holds_then_takes_the_freed_ones(tmp_path):
    """`python -m trainer.agent ID` while another live agent holds every core waits; when that
    agent dies its cores are free, and the joiner's trial runs on them."""
    config = {
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"trainer.seed": {"values": [0]}},
        "command": [*TRIAL, *TINY],
    }
    directory = tmp_path / "sweeps" / "join1"
    directory.mkdir(parents=True)
    store = SweepStore(directory / "sweep.db")
    store.set("config", config)
    limits = cpu_share.process_limits()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        cpu_slots.CpuSlots(directory).claim(holder.pid, slot=None, per_trial=None, limits=limits)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINER_CPU")}
        joiner = subprocess.Popen(
            [sys.executable, "-m", "trainer.agent", "join1", "--root", str(tmp_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        line = joiner.stdout.readline()
        while line and "waiting for one to end" not in line:
            line = joiner.stdout.readline()
        assert f"pid {holder.pid}" in line
        time.sleep(1.0)
        assert store.runs() == []  # nothing started while every core is held
    finally:
        holder.kill()
        holder.wait()
    out, _ = joiner.communicate(timeout=300)
    assert joiner.returncode == 0, out[-3000:]
    (run,) = store.runs()
    assert run.state == "finished"
    assert _cpu(run.run_dir)["affinity"] == list(limits.cores)


@two_cores
def test_wandb_agents_started_here_get_the_same_shares(tmp_path, monkeypatch):
    """backend=wandb: each `wandb agent` process (here a stand-in that reports what it got)
    starts with its share's environment and cores, which its trials inherit."""
    import wandb

    from trainer.sweep import server as backend_wandb

    monkeypatch.setattr(backend_wandb, "preflight", lambda: None)
    monkeypatch.setattr(wandb, "sweep", lambda config, project=None, entity=None: "sw1")
    report = (
        "import json, os, sys; json.dump({'budget': os.environ['TRAINER_CPU_BUDGET'], "
        "'omp': os.environ['OMP_NUM_THREADS'], 'cores': sorted(os.sched_getaffinity(0))}, "
        "open(os.path.join(sys.argv[1], f'agent{os.getpid()}.json'), 'w'))"
    )
    monkeypatch.setattr(
        backend_wandb,
        "agent_command",
        lambda path, count: [sys.executable, "-c", report, str(tmp_path)],
    )
    result = backend_wandb.run_server_sweep({"method": "random"}, SweepOptions(project="p", entity="e", sweep_id=None, agents=2, count=None), root=tmp_path)  # fmt: skip
    assert result["agent_exit_codes"] == [0, 0]
    got = [json.loads(p.read_text()) for p in tmp_path.glob("agent*.json")]
    assert len(got) == 2
    expected = max(1, cpu_share.process_limits().count // 2)
    assert all(g["budget"] == g["omp"] == str(expected) for g in got)
    assert all(len(g["cores"]) == expected for g in got)
    assert not set(got[0]["cores"]) & set(got[1]["cores"])


def test_a_joiner_that_waited_says_whole_lines_when_no_one_holds_cores_any_more(monkeypatch):
    answers = iter([(None, {4242: (0, 1)}), (cpu_share.Share(cpus=2, cores=(0, 1)), {})])
    monkeypatch.setattr(cpu_slots.CpuSlots, "__init__", lambda self, where: None)
    monkeypatch.setattr(cpu_slots.CpuSlots, "claim", lambda self, *a, **k: next(answers))
    monkeypatch.setattr(cpu_slots, "WAIT_S", 0.0)
    said: list[str] = []
    share = cpu_slots.claim_share("anywhere", say=said.append)
    assert share is not None and len(said) == 2
    assert "pid 4242" in said[0] and said[1].endswith(
        "no other agent of the sweep holds cores here now"
    )
