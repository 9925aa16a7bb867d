"""How the sweep command reads its agents' SLURM jobs once Hydra's launcher returns, and how an
agent tells the cluster ending its job from a stop by the user (no cluster needed here)."""

from __future__ import annotations

import signal

import pytest

from trainer.sweep.agents import slurm_jobs
from trainer.sweep.agents.launched import ended_by_cluster
from trainer.sweep.agents.local_agent import _final_state
from trainer.sweep.agents.slurm_jobs import AgentJobEnd


@pytest.mark.parametrize(
    "signum, environ, expected",
    [
        (signal.SIGUSR2, {}, True),  # SLURM's warning, wherever it comes
        (signal.SIGTERM, {"SLURM_JOB_ID": "42"}, True),  # requeue, preemption, scancel, limit
        (signal.SIGTERM, {}, False),  # `kill` by the user outside a job: an interruption
        (signal.SIGINT, {"SLURM_JOB_ID": "42"}, False),  # Ctrl-C is the user's
        (None, {"SLURM_JOB_ID": "42"}, False),
    ],
)
def test_the_cluster_ending_a_job_is_told_from_the_user_stopping_it(signum, environ, expected):
    assert ended_by_cluster(signum, environ) is expected


@pytest.mark.parametrize(
    "code, preempted, expected",
    [
        (143, True, "preempted"),
        (-9, True, "preempted"),
        (143, False, "crashed"),
        (0, True, "finished"),
    ],
)
def test_a_trial_stopped_by_its_agents_signal_ends_by_who_sent_it(code, preempted, expected):
    state = _final_state(code, False, interrupted=True, preempted=preempted)
    assert state == expected


def test_job_ids_come_from_submitits_folders(tmp_path):
    for job in ("7_0", "7_1"):
        folder = tmp_path / ".submitit" / job
        folder.mkdir(parents=True)
        (folder / f"{job}_submitted.pkl").write_bytes(b"")
    (tmp_path / ".submitit" / "7").mkdir()  # the array's own folder: its script only
    assert slurm_jobs.job_ids(str(tmp_path / ".submitit" / "%j")) == {0: "7_0", 1: "7_1"}
    single = tmp_path / "one" / "9"
    single.mkdir(parents=True)
    (single / "9_submitted.pkl").write_bytes(b"")
    assert slurm_jobs.job_ids(str(tmp_path / "one" / "%j")) == {0: "9"}


def test_a_job_slurm_ended_is_named_and_no_failure_of_the_sweep(capsys):
    ends = [
        AgentJobEnd("7_0", "COMPLETED", 0),
        AgentJobEnd("7_1", "CANCELLED", 143),
        AgentJobEnd("7_2", "NODE_FAIL", None),
        AgentJobEnd("7_3", "COMPLETED", 1),  # its agent gave up: the sweep's failure
        AgentJobEnd("7_4", "FAILED", None),  # the job failed outside its agent
        AgentJobEnd("-", "NOT SUBMITTED", None),  # sbatch refused it
    ]
    assert slurm_jobs.exit_codes(ends) == [0, 0, 0, 1, 1, 1]
    out = capsys.readouterr().out
    assert "job 7_1 for good (CANCELLED; agent exit 143)" in out
    assert "job 7_2 for good (NODE_FAIL; its agent left no result)" in out
    assert "job 7_4 failed (FAILED; its agent left no result)" in out
    assert "7_0" not in out and "7_3" not in out
