"""The sweep's agents as jobs of the Hydra launcher the user chose: joblib workers, submitit jobs
(local, and SLURM on a real cluster where one runs), never a launcher silently ignored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import run_cli
from trainer.sweep.agents import cpu_share, launched
from trainer.sweep.agents.launched import AgentJob

TINY = ["compile=off", "logger=none", "trainer.max_epochs=1", "trainer.max_steps=3"]
SWEEP = ["sweep=lr_random", "hydra.sweeper.run_cap=3", "hydra.sweeper.agents=2", *TINY]
JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def test_the_launchers_it_drives_and_one_it_refuses():
    assert launched.launcher_name(None) == "basic"
    assert launched.launcher_name(JOBLIB) == "joblib"
    assert launched.launcher_problem(JOBLIB) is None
    problem = launched.launcher_problem("my_plugins.QueueLauncher")
    assert "my_plugins.QueueLauncher" in problem and "submitit_slurm" in problem


def test_submitit_slurm_without_slurm_is_refused_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    problem = launched.launcher_problem(SLURM)
    assert "hydra/launcher=submitit_slurm" in problem and "sbatch" in problem


def test_an_agent_jobs_config_has_its_own_dir_and_the_sweeps_fixed_overrides(tmp_path):
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": "multirun/x", "subdir": "${hydra.job.num}"},
                "overrides": {
                    "task": ["sweep=lr_random", "optimizer.lr=0.1,0.2", "compile=off"],
                    "hydra": [
                        "hydra.sweeper.run_cap=4",
                        "hydra/launcher=joblib",
                        "hydra.launcher.n_jobs=2",
                        "hydra.sweep.dir=elsewhere",
                        "+hydra.job.env_set.A=1",
                    ],
                },
            }
        }
    )
    job = launched.job_config(config, tmp_path / "agent-jobs")
    assert job.hydra.sweep.dir == str(tmp_path / "agent-jobs")
    assert list(job.hydra.overrides.hydra) == [
        "hydra.sweeper.run_cap=4",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "+hydra.job.env_set.A=1",
        f"hydra.sweep.dir={tmp_path / 'agent-jobs'}",
    ]
    assert config.hydra.sweep.dir == "multirun/x"  # the sweep's own config is untouched
    assert launched.fixed_task_overrides(config) == ["sweep=lr_random", "compile=off"]


def test_on_a_cluster_node_the_jobs_allocation_is_the_agents():
    job = AgentJob(["python", "-m", "trainer.agent", "d"], {cpu_share.ENV_SLOT: "1/2"}, "/")
    slurm = {"SLURM_CPUS_PER_TASK": "4", "CUDA_VISIBLE_DEVICES": "2,3"}
    env = launched.for_job(job, True, slurm)
    assert cpu_share.ENV_SLOT not in env and env[cpu_share.ENV_PER_TRIAL] == "4"
    assert launched._job_argv(job, slurm)[-2:] == ["--devices", "0,1"]
    here = launched.for_job(job, False, {})  # joblib, submitit_local: this machine's slot
    assert here[cpu_share.ENV_SLOT] == "1/2"
    assert launched._job_argv(job, {}) == job.argv


def _finished_once(out: Path) -> dict:
    (results,) = out.glob("sweeps/*/results.json")
    res = json.loads(results.read_text())
    assert [r["state"] for r in res["runs"]] == ["finished"] * 3
    assert len({json.dumps(r["params"], sort_keys=True) for r in res["runs"]}) == 3
    return res


@pytest.mark.slow
def test_joblib_runs_each_agent_as_a_job(tmp_path):
    result = run_cli(*SWEEP, "hydra/launcher=joblib", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "agents: 2 joblib job(s)" in result.stdout
    _finished_once(tmp_path / "outputs")
    (jobs,) = (tmp_path / "outputs").glob("sweeps/*/agent-jobs")
    assert sorted(p.name for p in jobs.iterdir()) == ["0", "1"]  # Hydra's job dirs
    assert all((jobs / n / ".hydra" / "hydra.yaml").is_file() for n in ("0", "1"))


@pytest.mark.slow
def test_submitit_local_runs_each_agent_as_a_submitit_job(tmp_path):
    result = run_cli(*SWEEP, "hydra/launcher=submitit_local", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _finished_once(tmp_path / "outputs")
    logs = sorted((tmp_path / "outputs").glob("sweeps/*/agent-jobs/.submitit/*/*_log.out"))
    assert len(logs) == 2
    assert sum("agent: starting run" in log.read_text() for log in logs) >= 1


@pytest.mark.slow
def test_submitit_slurm_without_slurm_fails_before_anything_starts(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    result = run_cli(*SWEEP, "hydra/launcher=submitit_slurm", cwd=tmp_path, env={"PATH": str(bare)})
    assert result.returncode == 2
    assert "hydra/launcher=submitit_slurm" in result.stderr and "sbatch" in result.stderr
    assert not (tmp_path / "outputs" / "sweeps").exists()


@pytest.mark.slow
def test_submitit_slurm_runs_each_agent_as_a_slurm_job(slurm_cluster, tmp_path):
    result = run_cli(
        *SWEEP,
        "hydra/launcher=submitit_slurm",
        f"hydra.launcher.partition={slurm_cluster['partition']}",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=10",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _finished_once(tmp_path / "outputs")
    folders = (tmp_path / "outputs").glob("sweeps/*/agent-jobs/.submitit/*_*")
    jobs = sorted(p.name for p in folders if p.is_dir())
    assert len(jobs) == 2  # an array job of two tasks: <array id>_0, <array id>_1
    expected = [f"{job}|COMPLETED" for job in jobs]
    deadline, listed = time.monotonic() + 60, []
    while sorted(listed) != expected and time.monotonic() < deadline:  # sacct lags a second
        time.sleep(1)
        listed = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", jobs[0].split("_")[0]],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.split()
    assert sorted(listed) == expected


STAND_IN = """
import signal, sys, time
got = []
def note(signum, frame):
    got.append(signal.Signals(signum).name)
    if signum == signal.SIGTERM:
        print(" ".join(got), flush=True)
        sys.exit(0)
signal.signal(signal.SIGUSR2, note)
signal.signal(signal.SIGTERM, note)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_a_forwarding_wandb_agent_gets_the_warning_then_sigterm(tmp_path):
    """In a job, `wandb agent --forward-signals` passes SLURM's warning to its trial (which
    saves and marks its run preempting); the SIGTERM after it makes the agent take no new run
    and exit once the trial has ended. A stand-in process records what it receives."""
    agent = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().strip() == "ready"
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR2)).start()  # SLURM's warning
    guard = threading.Timer(30, agent.kill)  # no SIGTERM: fail (-9), do not hang
    guard.start()
    assert launched._wait_through_warning(agent, then_stop=True) == 0
    assert agent.stdout.read().split() == ["SIGUSR2", "SIGTERM"]
    guard.cancel()


def test_submitit_warnings_go_to_a_log_file_and_sacct_is_said_once(tmp_path, capsys):
    import logging

    log, logger = tmp_path / "jobs" / "submitit.log", logging.getLogger("submitit")
    import submitit  # noqa: F401  (configures its logger, as the launcher's import does)

    saved = list(logger.handlers), logger.propagate
    launched.quiet_submitit(log)
    try:
        for call in range(1, 4):
            logger.warning(
                "Call #%d - Bypassing sacct error Command '['sacct']' returned non-zero exit "
                "status 1., status may be inaccurate.",
                call,
            )
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        for handler in saved[0]:
            logger.addHandler(handler)
        logger.propagate = saved[1]
    out, err = capsys.readouterr()
    assert "Bypassing" not in out + err
    assert out.count("sacct") == 1 and str(log) in out
    assert log.read_text().count("Bypassing sacct error") == 3
