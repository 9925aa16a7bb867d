"""The SLURM cluster the cluster tests submit to (`.ci/slurm` starts it in CI): a batch job
submitted to the fixture's partition runs on its node, and `sacct` shows it. Skipped where no
SLURM cluster runs."""

from __future__ import annotations

import subprocess
import time

import pytest


def sacct_state(job: str) -> str:
    """The job's state in the accounting database ('' until slurmctld has sent it there)."""
    listed = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return listed.stdout.strip()


@pytest.mark.slow
def test_a_batch_job_runs_on_the_cluster_and_sacct_shows_it(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    submitted = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--parsable",
            f"--partition={slurm_cluster['partition']}",
            "--time=2",
            f"--output={out}",
            "--wrap",
            'echo "ran $SLURM_JOB_ID on $SLURMD_NODENAME"',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # behind whatever else the node runs
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    assert out.read_text().split() == ["ran", job, "on", slurm_cluster["node"]]
    deadline = time.monotonic() + 30  # accounting is written asynchronously, within seconds
    while sacct_state(job) != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sacct_state(job) == "COMPLETED"
