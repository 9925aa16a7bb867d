"""`python -m trainer.sweep cancel SWEEP` on a sweep whose two agents are SLURM jobs (a real
one-node cluster), mid-trial: every run gets SIGTERM, saves its last.pt and ends cancelled, both
jobs end COMPLETED (exit 0: a cancelled sweep is no preemption, so nothing is requeued), the
sweep command returns, and nothing resumes afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.sweep_faults import slurm, until
from trainer.outputs.layout import RunLayout
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow  # a SLURM cluster, a sweep, processes

SWEEP = [
    "sweep=lr_random",
    "hydra.sweeper.run_cap=6",  # runs left when it is cancelled: none of them may start
    "hydra.sweeper.agents=2",
    "compile=off",
    "logger=none",
    "trainer.max_epochs=300",  # far longer than the test: the cancel comes mid-trial
    "hydra/launcher=submitit_slurm",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=10",
]


def _both_training(out: Path) -> SweepStore | None:
    """The sweep's store once each of its two agents' runs has logged an epoch."""
    found = list(out.glob("sweeps/*/sweep.db"))
    if not found:
        return None
    store = SweepStore(found[0])
    running = [r for r in store.runs() if r.state == "running" and r.history]
    return store if len(running) == 2 else None


def _jobs(out: Path) -> list[str]:
    """The agents' SLURM job ids: submitit's folders of the jobs it submitted (an array's
    tasks, ARRAY_TASK, beside the array's own folder)."""
    folders = out.glob("sweeps/*/agent-jobs/.submitit/*")
    names = sorted(p.name for p in folders if p.name.replace("_", "").isdigit())
    return [n for n in names if "_" in n] or names


def _accounted(jobs: list[str]) -> list[str] | None:
    """Each job's final state in SLURM's accounting, once every one has ended."""
    listed = slurm("sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State", "-j", ",".join(jobs))
    states = dict(line.split("|", 1) for line in listed.split())
    if sorted(states) != jobs or any(s in ("PENDING", "RUNNING") for s in states.values()):
        return None
    return [states[j] for j in jobs]


def test_cancel_ends_every_job_and_nothing_resumes(slurm_cluster, tmp_path):
    started = time.monotonic()
    out = tmp_path / "outputs"
    partition = f"hydra.launcher.partition={slurm_cluster['partition']}"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trainer", *SWEEP, partition],
        cwd=tmp_path,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        store = until("both agents' runs training", lambda: _both_training(out), timeout=240)
        print(f"two runs training in SLURM jobs: {time.monotonic() - started:.1f} s")
        jobs = _jobs(out)
        sweep_id = store.get("sweep_id")
        asked = time.monotonic()
        assert sweep_cli(["--root", str(out), "cancel", sweep_id]) == 0
        output, _ = sweep.communicate(timeout=120)
        print(f"sweep command ended {time.monotonic() - asked:.1f} s after the cancel")
    finally:
        sweep.kill()
    assert sweep.returncode == 0, output[-4000:]
    assert len(jobs) == 2, jobs
    states = until("SLURM's accounting of both jobs", lambda: _accounted(jobs), 60, every=1)
    assert states == ["COMPLETED", "COMPLETED"]  # exit 0: no failure, no requeue
    runs = store.runs()
    assert [r.state for r in runs] == ["cancelled", "cancelled"], output[-4000:]
    for run in runs:
        assert RunLayout(Path(run.run_dir)).last.is_file()  # each saved where it stopped
    res = json.loads((Path(runs[0].run_dir).parents[1] / "results.json").read_text())
    assert res["state"] == "cancelled" and res["state_changed"]["verb"] == "cancel"

    time.sleep(2 * steering.POLL_S + 1.0)  # any agent left would have looked twice by now
    assert [(r.id, r.state) for r in store.runs()] == [(r.id, "cancelled") for r in runs]
    assert slurm("squeue", "-h", "-j", ",".join(jobs), check=False).strip() == ""
    restarts = [
        line
        for line in slurm(
            "sacct", "-n", "-P", "-D", "-X", "-o", "State", "-j", ",".join(jobs)
        ).split()
        if line == "REQUEUED"
    ]
    assert restarts == []
    store.close()
    print(f"cancel test: {time.monotonic() - started:.1f} s")
