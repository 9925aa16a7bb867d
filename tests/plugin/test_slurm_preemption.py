"""SLURM's warning signal mid-trial on a real one-node cluster: the trial saves last.pt, its run
goes back to the store as preempted, submitit requeues the job, and the requeued job's agent
resumes the run from its checkpoint; nothing is lost and nothing trains twice from scratch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.sweep_faults import slurm, until
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow  # a SLURM cluster, sweeps, processes

SWEEP = [
    "sweep=lr_random",
    "hydra.sweeper.run_cap=2",
    "hydra.sweeper.agents=1",
    "compile=off",
    "logger=none",
    "trainer.max_epochs=25",  # about 10 s of training: the signal comes mid-trial
    "hydra/launcher=submitit_slurm",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=60",  # a signal long before the limit: preempted, requeued
]


def _job_id(out: Path) -> str | None:
    """The agent's job id: submitit's folder of the one job it submitted."""
    found = [p.name for p in out.glob("sweeps/*/agent-jobs/.submitit/*") if p.name.isdigit()]
    return found[0] if found else None


def _training(out: Path) -> SweepStore | None:
    """The sweep's store once its first run has logged two epochs."""
    found = list(out.glob("sweeps/*/sweep.db"))
    if not found:
        return None
    store = SweepStore(found[0])
    running = [r for r in store.runs() if r.state == "running" and len(r.history) >= 2]
    return store if running else None


def _requeued(job: str, node: str, pending_since: list[float]) -> bool:
    """Whether the job is back after its requeue. SLURM holds a requeued job for about two
    minutes; once its first instance has left the node (a job started while it is still
    completing is killed: "Job credential revoked"), the test starts it now."""
    fields = dict(
        item.split("=", 1)
        for item in slurm("scontrol", "-o", "show", "job", job).split()
        if "=" in item
    )
    if int(fields.get("Restarts", 0)) < 1:
        return False
    if fields.get("JobState") != "PENDING":
        return True
    pending_since[:] = pending_since or [time.monotonic()]
    node_state = slurm("sinfo", "-h", "-n", node, "-o", "%t").split()
    if time.monotonic() - pending_since[0] > 5 and not any("comp" in s for s in node_state):
        slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
    return False


def test_a_warning_signal_mid_trial_resumes_the_run_in_the_requeued_job(slurm_cluster, tmp_path):
    out = tmp_path / "outputs"
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            *SWEEP,
            f"hydra.launcher.partition={slurm_cluster['partition']}",
        ],
        cwd=tmp_path,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        store = until("the first trial's second epoch", lambda: _training(out), timeout=300)
        job = until("the agent's SLURM job", lambda: _job_id(out))
        (first,) = [r for r in store.runs() if r.state == "running"]
        slurm("scancel", "--signal=USR2", job)  # what SLURM sends before a time limit
        pending: list[float] = []  # the requeued job is started as soon as the node is free
        node = slurm_cluster["node"]
        until("the requeued job", lambda: _requeued(job, node, pending), timeout=180, every=1)
        output, _ = sweep.communicate(timeout=420)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, output[-4000:]

    (results,) = out.glob("sweeps/*/results.json")
    res = json.loads(results.read_text())
    assert [r["state"] for r in res["runs"]] == ["finished", "finished"]
    by_id = {r["id"]: r for r in res["runs"]}
    assert by_id[first.id]["preemptions"] == 1 and by_id[first.id]["epochs"] == 25
    assert f"preempted: {first.id} once, resumed from its checkpoint" in output
    log = Path(first.log_path).read_text()
    assert "resumed from" in log and "last.pt in epoch" in log  # from its checkpoint, not step 0
    assert len([r for r in SweepStore(results.parent / "sweep.db").runs()]) == 2  # no rerun row
    accounted = until(
        "sacct to show the requeue",
        lambda: (
            "REQUEUED" in slurm("sacct", "-n", "-P", "-D", "-X", "-o", "State", "-j", job)
            and slurm("sacct", "-n", "-P", "-D", "-X", "-o", "State", "-j", job)
        ),
        timeout=60,
        every=1,
    )
    assert accounted.split()[-1] == "COMPLETED"
