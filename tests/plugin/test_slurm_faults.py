"""Faults a real one-node SLURM cluster inflicts on a sweep's agent jobs mid-trial, without the
warning signal: `scontrol requeue` (SLURM's preemption with PreemptMode=REQUEUE: SIGTERM, then
back in the queue). The interrupted run goes back to the sweep and resumes from its last.pt (in
the requeued job, or on the other agent), every grid point finishes exactly once, and the sweep
command waits for the requeued job and exits 0. The other faults (scancel, the node down,
slurmctld restarted, a time limit without warning) run in `python -m benchmarks.sweep_faults`,
on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from benchmarks.sweep_faults import run_fault

pytestmark = pytest.mark.slow  # a SLURM cluster, sweeps, processes


def test_scontrol_requeue_mid_trial_resumes_the_run_and_the_command_waits(slurm_cluster, tmp_path):
    outcome = run_fault(
        "requeue", tmp_path, None, slurm_cluster["partition"], slurm_cluster["node"]
    )
    assert outcome.ok, outcome.output_tail
    assert outcome.victim["preemptions"] == 1 and outcome.victim["losses"] == 0
    assert "interrupted" not in outcome.output_tail


def test_the_sweep_command_waits_for_its_only_agent_job_to_come_back(slurm_cluster, tmp_path):
    """One agent: `scontrol requeue` ends its job's first instance (exit 143); the command
    waits for the requeued job instead of taking that exit for the end, and its agent resumes
    the run."""
    outcome = run_fault(
        "requeue", tmp_path, None, slurm_cluster["partition"], slurm_cluster["node"], agents=1
    )
    assert outcome.ok, outcome.output_tail
    assert outcome.victim["preemptions"] == 1
    assert "interrupted" not in outcome.output_tail
