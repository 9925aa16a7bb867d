"""The sweep command's agents as SLURM jobs, after Hydra's launcher has returned: a job that SLURM
requeued (`scontrol requeue`, preemption with PreemptMode=REQUEUE, a node that went down) is the
same agent slot coming back, so the command waits for it; a job SLURM ended for good is named."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobStatus

# Job states in which the job may still run its agent (again, after a requeue).
ACTIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
}
# States in which SLURM itself ended the job under its agent; its run went back to the sweep.
# (REQUEUE_HOLD: requeued but held until someone releases it: the command does not wait.)
ENDED_BY_CLUSTER = {
    "CANCELLED",
    "PREEMPTED",
    "NODE_FAIL",
    "TIMEOUT",
    "BOOT_FAIL",
    "DEADLINE",
    "REQUEUE_HOLD",
}
POLL_S = 5.0  # how often the command asks SLURM about a job it waits for
SILENT_S = 600.0  # SLURM answering nothing (controller and accounting down) this long: stop asking
JOB_ID = re.compile(r"^(\d+)(?:_(\d+))?$")


@dataclass
class AgentJobEnd:
    """How one agent job ended: its SLURM id and final state, and its agent's exit code (None:
    the job left no result, its agent was killed with it)."""

    job_id: str
    state: str
    code: int | None


def job_ids(folder: str) -> dict[int, str]:
    """The launcher's jobs by Hydra job number, from submitit's files in `folder` (the
    launcher's submitit_folder, `%j` standing for a job id)."""
    found: dict[int, str] = {}
    pattern = folder.replace("%j", "*")
    base = Path("/") if pattern.startswith("/") else Path()
    # oldest first (a resumed sweep's folder keeps its earlier jobs): the newest job wins
    for submitted in sorted(base.glob(pattern.lstrip("/")), key=lambda p: p.stat().st_mtime):
        for pickle in Path(submitted).glob("*_submitted.pkl"):
            job_id = pickle.name[: -len("_submitted.pkl")]
            match = JOB_ID.match(job_id)
            if match:
                found[int(match.group(2) or 0)] = job_id
    return found


def _ask(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def job_state(job_id: str) -> str | None:
    """The job's state: squeue's while SLURM's controller lists it, else the accounting's
    (sacct); None when neither answers."""
    queued = _ask(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if queued:
        return queued.split()[0]
    accounted = _ask(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State"])
    if accounted:
        return accounted.splitlines()[-1].split()[0]  # "CANCELLED by 0": CANCELLED
    return None


def wait_for(
    job_id: str, ended: Callable[[], bool], poll_s: float = POLL_S, silent_s: float = SILENT_S
) -> str:
    """Wait while the job may still run its agent; its final state. SLURM forgets a finished
    job (squeue after MinJobAge; sacct where no accounting runs): one that left its result
    (`ended()`) then COMPLETED, else "UNKNOWN" once SLURM has said nothing for `silent_s`."""
    told, heard = False, time.monotonic()
    while True:
        state = job_state(job_id)
        if state is None and ended():
            return "COMPLETED"
        if state is not None:
            heard = time.monotonic()
            if state not in ACTIVE:
                return state
            if not told and state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
                print(
                    f"agents: SLURM job {job_id} is {state} again (requeued): waiting for it, "
                    "its agent resumes the runs the cluster took back",
                    flush=True,
                )
                told = True
        elif time.monotonic() - heard > silent_s:
            return "UNKNOWN"
        time.sleep(poll_s)


def _result(folder: str, job_id: str) -> Path:
    """Where submitit keeps the result of the job's task."""
    # optional: submitit comes with the [cluster] extra
    import submitit

    return submitit.SlurmJob(folder=folder, job_id=job_id, tasks=(0,)).paths.result_pickle


def agent_code(folder: str, job_id: str) -> int | None:
    """The exit code the job's agent returned (its submitit result), or None when it left none
    (killed with its job) or failed outside the agent."""
    # optional: submitit comes with the [cluster] extra
    import submitit

    result = _result(folder, job_id)
    if not result.exists():
        return None
    outcome, value = submitit.core.utils.pickle_load(result)
    if outcome != "success" or getattr(value, "status", None) != JobStatus.COMPLETED:
        return None
    return int(value.return_value)


def settle(folder: str, count: int) -> list[AgentJobEnd]:
    """Wait until every one of the `count` agent jobs has ended for good (requeued ones run
    again first); how each ended."""
    ends = []
    ids = job_ids(folder)
    for num in range(count):
        job_id = ids.get(num)
        if job_id is None:  # never submitted (the launcher failed first)
            ends.append(AgentJobEnd("-", "NOT SUBMITTED", None))
            continue
        state = wait_for(job_id, lambda job=job_id: _result(folder, job).exists())
        ends.append(AgentJobEnd(job_id, state, agent_code(folder, job_id)))
    return ends


def exit_codes(ends: list[AgentJobEnd]) -> list[int]:
    """The agents' exit codes for the sweep's outcome. A job that SLURM ended under its agent
    (cancelled, killed, timed out, its node failed) is named here and counts as no failure:
    its run went back to the sweep, and the sweep's state says whether the other agents
    finished it."""
    codes = []
    for end in ends:
        how = "its agent left no result" if end.code is None else f"agent exit {end.code}"
        if end.state in ENDED_BY_CLUSTER:
            print(
                f"agents: SLURM ended job {end.job_id} for good ({end.state}; {how}); a run it "
                "held went back to the sweep for the other agents",
                flush=True,
            )
            codes.append(0)
        elif end.state != "COMPLETED" or end.code is None:  # it failed, or never ran
            print(
                f"agents: SLURM job {end.job_id} failed ({end.state}; {how}); its log is in "
                "the sweep's agent-jobs/.submitit/",
                flush=True,
            )
            codes.append(1)
        else:
            codes.append(end.code)
    return codes
