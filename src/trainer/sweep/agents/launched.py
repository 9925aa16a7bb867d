"""Agents as jobs of the launcher the user chose (`hydra/launcher=joblib`, `submitit_local`,
`submitit_slurm`, `ray`): each of the sweep command's N agents is one job of that launcher, the
same `python -m trainer.agent` (or `wandb agent`) process a local agent is, started inside the
job on the resources the launcher gave it. `basic` (Hydra's default) keeps the agents as plain
local processes; a launcher the sweeper does not know is refused before anything starts."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

from trainer.sweep.agents import cpu_share, gpu_slots, slurm_jobs

BASIC = "basic"
# Hydra's launcher plugins the sweeper drives, by the class their config instantiates.
DRIVEN = {
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher": BASIC,
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher": "joblib",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher": "submitit_local",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher": "submitit_slurm",
    "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher": "ray",
}
SLURM = "submitit_slurm"
WARNING_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)  # SLURM's --signal before a time limit
# `wandb agent` passing signals on to its trial: after a warning, SIGTERM makes it take no new
# run and exit once that trial has saved (the server hands the preempted run out again).
FORWARDING = "--forward-signals"
WARNING_TO_STOP_S = 0.5  # the warning reaches the trial before the SIGTERM that follows it
JOB_DIR = "agent-jobs"  # where a launched agent's Hydra job writes (beside the sweep's runs)


def ended_by_cluster(signum: int | None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a signal an agent got is its cluster ending the job under it: SLURM's warning, or
    SIGTERM inside a SLURM job (scancel, `scontrol requeue` and preemption, a time limit without
    a warning, a node going down). Its run is then not its fault: it goes back to the sweep."""
    if signum in WARNING_SIGNALS:
        return True
    return signum == signal.SIGTERM and bool(environ.get("SLURM_JOB_ID"))


def launcher_name(target: str | None) -> str | None:
    """The `hydra/launcher` option whose class is `target` (None: one the sweeper cannot drive);
    no launcher configured reads as basic."""
    return BASIC if not target else DRIVEN.get(target)


def launcher_problem(target: str | None) -> str | None:
    """Why the sweep cannot run its agents through the launcher `target`, told before anything
    starts (None: it can)."""
    name = launcher_name(target)
    if name is None:
        known = ", ".join(sorted(set(DRIVEN.values())))
        return (
            f"hydra.launcher: the sweeper cannot run its agents through {target} (it drives "
            f"{known}); choose one of those with hydra/launcher=NAME, or run "
            "`python -m trainer.agent SWEEP_ID` yourself where that launcher would have"
        )
    if name == SLURM and shutil.which("sbatch") is None:
        return (
            "hydra/launcher=submitit_slurm: no SLURM on this machine (`sbatch` is not on PATH); "
            "run the sweep command on a SLURM login node, or choose another launcher "
            "(hydra/launcher=basic runs the agents here)"
        )
    return None


@dataclass(frozen=True)
class AgentJob:
    """One agent as a launcher's job: its command, the environment it adds to the job's own
    (the job keeps what its launcher set: SLURM's variables, CUDA_VISIBLE_DEVICES), its cwd."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def env_added(env: Mapping[str, str]) -> dict[str, str]:
    """What `env` (a local agent's full environment) adds to or changes in this process's."""
    return {k: v for k, v in env.items() if os.environ.get(k) != v}


def for_job(job: AgentJob, on_cluster: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment an agent job runs with. On a cluster node the job's allocation is the
    agent's: its CPU slot of the submitting machine is dropped (the job's cores are its own,
    `SLURM_CPUS_PER_TASK`, else the job's `SLURM_CPUS_ON_NODE`, a trial's share unless the
    sweep set one), and the GPUs SLURM gave it
    (`CUDA_VISIBLE_DEVICES`) are its devices."""
    env = {**environ, **job.env}
    if on_cluster:
        env.pop(cpu_share.ENV_SLOT, None)
        per_task = environ.get("SLURM_CPUS_PER_TASK") or environ.get("SLURM_CPUS_ON_NODE", "")
        if cpu_share.ENV_PER_TRIAL not in job.env and per_task.isdigit():
            env[cpu_share.ENV_PER_TRIAL] = per_task
    return env


def _job_argv(job: AgentJob, environ: Mapping[str, str]) -> list[str]:
    """`--devices` for a `python -m trainer.agent` job that SLURM gave GPUs."""
    granted = environ.get(gpu_slots.ENV, "").strip()
    if not granted or "trainer.agent" not in job.argv or "--devices" in job.argv:
        return list(job.argv)
    count = len([d for d in granted.split(",") if d.strip()])
    return [*job.argv, "--devices", ",".join(str(i) for i in range(count))]


def run_agent_job(jobs: list[AgentJob], on_cluster: bool, cfg: Any = None) -> int:
    """The task function of every agent job (Hydra's launcher calls it with the job's config):
    run agent `hydra.job.num` as a process, return its exit code."""
    job = jobs[int(HydraConfig.get().job.num)]
    environ = dict(os.environ)
    argv = _job_argv(job, environ) if on_cluster else list(job.argv)
    agent = subprocess.Popen(argv, env=for_job(job, on_cluster, environ), cwd=job.cwd)
    if not on_cluster or threading.current_thread() is not threading.main_thread():
        return agent.wait()
    return _wait_through_warning(agent, then_stop=FORWARDING in argv)


def _wait_through_warning(agent: subprocess.Popen, then_stop: bool = False) -> int:
    """Wait for the agent. SLURM's warning before a time limit or preemption (SIGUSR1/SIGUSR2)
    is passed on to it (its trial saves, its run goes back to the sweep as preempted), and the
    job's own handler of that signal (submitit's: checkpoint and requeue this job, then exit)
    runs once the agent has recorded its run and exited, not while its trial is saving.
    `then_stop` (a `wandb agent --forward-signals`): SIGTERM follows the warning."""
    got: list[int] = []

    def on_warning(signum: int, frame: Any) -> None:
        if not got:
            got.append(signum)
            with contextlib.suppress(ProcessLookupError):
                agent.send_signal(signum)

    previous = {sig: signal.signal(sig, on_warning) for sig in WARNING_SIGNALS}
    try:
        code = _wait_then_stop(agent, got) if then_stop else agent.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if got and callable(previous[got[0]]):
        previous[got[0]](got[0], None)  # submitit: requeue (a requeued job is a new agent)
    return code


def _wait_then_stop(agent: subprocess.Popen, warned: list[int]) -> int:
    """Wait for the agent; WARNING_TO_STOP_S after a warning, send it SIGTERM once."""
    stopped = False
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return agent.wait(timeout=WARNING_TO_STOP_S)
        if warned and not stopped:
            stopped = True
            with contextlib.suppress(ProcessLookupError):
                agent.send_signal(signal.SIGTERM)


class LauncherJobs:
    """Starts a sweep's agents as jobs of the configured Hydra launcher and waits for them."""

    def __init__(self, hydra_context: Any, config: Any, name: str) -> None:
        self.hydra_context, self.config, self.name = hydra_context, config, name

    def __call__(self, jobs: list[AgentJob], where: Path) -> list[int]:
        """Launch `jobs` (their Hydra job dirs under `where`), block until all end, and return
        their exit codes (1 for a job that failed outside its agent)."""
        if self.name.startswith("submitit"):
            quiet_submitit(where / "submitit.log")
        task = functools.partial(run_agent_job, jobs, self.name == SLURM)
        config = job_config(self.config, where)
        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=self.hydra_context, task_function=task, config=config
        )
        print(f"agents: {len(jobs)} {self.name} job(s), job dirs in {where}", flush=True)
        fixed = fixed_task_overrides(self.config)
        try:
            returns = launcher.launch([list(fixed) for _ in jobs], initial_job_idx=0)
        except Exception as err:  # a job ended without a result: not requeued, or lost
            if self.name == SLURM:  # SLURM knows how each job ended; the others may still run
                print(f"agents: {type(err).__name__}: {err}", flush=True)
                return self._settled(config, len(jobs))
            print(
                f"agents: a {self.name} job ended without a result ({type(err).__name__}: "
                f"{err}); other jobs may still run, and a preempted run waits for the next "
                "agent (python -m trainer.agent SWEEP_ID)",
                flush=True,
            )
            return [1 for _ in jobs]
        if self.name == SLURM:  # a job's first exit may be a requeue: it comes back
            return self._settled(config, len(jobs))
        return [_code(r) for r in returns]

    @staticmethod
    def _settled(config: Any, count: int) -> list[int]:
        """The agents' exit codes once SLURM has ended every job for good."""
        folder = str(config.hydra.launcher.submitit_folder)
        return slurm_jobs.exit_codes(slurm_jobs.settle(folder, count))


def quiet_submitit(log_path: Path) -> None:
    """submitit's logger (its per-poll warnings, e.g. "Bypassing sacct error" three times a poll
    on a cluster without accounting) writes to `log_path`, not the terminal; the first warning
    about sacct is said once, in our words."""
    # optional: the [cluster] extra; importing it configures its logger, which comes first
    import submitit  # noqa: F401

    logger = logging.getLogger("submitit")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_SacctOnce(log_path))
    logger.addHandler(handler)
    logger.propagate = False


class _SacctOnce(logging.Filter):
    """Lets every record through to the log file; the first sacct failure is said on stdout."""

    def __init__(self, log_path: Path) -> None:
        super().__init__()
        self.log_path, self.said = log_path, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.said and "sacct" in record.getMessage():
            self.said = True
            print(
                "agents: SLURM's accounting (sacct) does not answer here, so submitit reads job "
                f"states from squeue, which may lag; its messages go to {self.log_path}",
                flush=True,
            )
        return True


def fixed_task_overrides(config: Any) -> list[str]:
    """The command line's overrides that are no sweep (`sweep=lr_random`, `compile=off`, not
    `optimizer.lr=0.1,0.2`): each agent job's config is composed with them, so that it has the
    sweep command's sweeper (Hydra 1.4 checks that a job keeps it)."""
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    return [o.input_line for o in parsed if not o.is_sweep_override()]


def job_config(config: Any, where: Path) -> Any:
    """The sweep command's config as its launcher sees it for the agent jobs: their Hydra job
    dirs under `where` (`<where>/<job number>`)."""
    # A plain copy: Hydra's read-only flags (set node by node on Hydra 1.4) stay on the original.
    config = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    config.hydra.sweep.dir = str(where)
    config.hydra.sweep.subdir = "${hydra.job.num}"
    kept = [o for o in config.hydra.overrides.hydra if not o.startswith("hydra.sweep.")]
    config.hydra.overrides.hydra = [*kept, f"hydra.sweep.dir={where}"]
    return config


def _code(job_return: Any) -> int:
    """An agent job's exit code; a job that raised (its launcher failed it) counts as 1."""
    if job_return.status != JobStatus.COMPLETED:
        print(f"agents: a job failed: {job_return._return_value!r}", flush=True)
        return 1
    return int(job_return.return_value)


StartAgents = Callable[[list[AgentJob], Path], list[int]]
