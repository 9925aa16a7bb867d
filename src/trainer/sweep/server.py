"""`backend=wandb`: create (or join) the sweep on the W&B server and run `wandb agent`s here."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import wandb
import yaml
from wandb.errors import AuthenticationError

from trainer.sweep.agents import cpu_share, gpu_slots
from trainer.sweep.agents.gpu_slots import DevicePlan
from trainer.sweep.agents.launched import FORWARDING, JOB_DIR, AgentJob, StartAgents, env_added
from trainer.sweep.definition import drift
from trainer.sweep.options import AgentHooks, SweepOptions
from trainer.sweep.search.suggest.wandb_door import scheduler_command
from trainer.sweep.store.directory import (
    SweepLayout,
    record_wandb,
    wandb_view,
    write_sweep_yaml,
)

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0
RESUME = "trainer.resume=auto"  # a trial whose run dir holds a checkpoint continues from it
SCHEDULER_STOP_S = 30.0  # the scheduler finishes its step after SIGINT, or is killed


class ServerUnavailable(RuntimeError):
    """No API key, or the W&B server cannot be reached; nothing was started. A missing or
    refused key is refused like any other setting (exit code 2); an unreachable server, 1."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL


@contextlib.contextmanager
def _fresh_online_wandb(url: str) -> Iterator[None]:
    """wandb set up anew from the environment, online for `url` (wandb.login refuses to look
    for credentials in offline mode) and silenced; torn down afterwards, so that neither the
    credentials found nor the mode outlive the check. Never under a live run."""
    saved = {k: os.environ.get(k) for k in ("WANDB_MODE", "WANDB_BASE_URL")}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        wandb.teardown()  # settings file and environment are read again by the next login
        os.environ.update(WANDB_MODE="online", WANDB_BASE_URL=url)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            wandb.teardown()


def api_key_present(url: str, *, verify: bool = False) -> bool:
    """Whether wandb finds an API key for `url` where `wandb login` and W&B users keep it:
    WANDB_API_KEY, W&B's settings file (api_key) or ~/.netrc. With `verify`, the server must
    also accept it. A malformed or refused key raises ServerUnavailable naming the fix."""
    if wandb.run is not None:  # a live run in this process: it already has its credentials
        return True
    try:
        with _fresh_online_wandb(url):
            return bool(wandb.login(verify=verify, prompt=False))
    except AuthenticationError as error:
        raise ServerUnavailable(
            f"hydra.sweeper.backend=wandb: the W&B API key for {url} is not valid ({error}). "
            "Fix WANDB_API_KEY or run `wandb login --relogin` (or use hydra.sweeper.backend=local "
            "to sweep offline).",
            exit_code=2,
        ) from None


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One TCP connection to the server within `timeout` seconds, no retries."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)

    def connect() -> bool:
        try:
            with socket.create_connection((parsed.hostname, port), timeout=timeout):
                return True
        except OSError:
            return False

    # Name resolution ignores socket timeouts; a daemon thread bounds the whole probe.
    result: list[bool] = []
    probe = threading.Thread(target=lambda: result.append(connect()), daemon=True)
    probe.start()
    probe.join(timeout + 1.0)
    return bool(result and result[0])


def preflight(url: str | None = None) -> None:
    """Raise ServerUnavailable (within a few seconds) unless a key is set and the server answers."""
    url = url or base_url()
    if not api_key_present(url):
        raise ServerUnavailable(
            f"hydra.sweeper.backend=wandb needs a W&B API key for {url}: run `wandb login`, "
            "set WANDB_API_KEY or api_key in W&B's settings file (or use hydra.sweeper.backend=local to sweep offline).",
            exit_code=2,
        )
    if not reachable(url):
        raise ServerUnavailable(
            f"hydra.sweeper.backend=wandb cannot reach {url} within {PROBE_TIMEOUT_S:g} s: check "
            "the network or WANDB_BASE_URL (or use hydra.sweeper.backend=local to sweep offline "
            "and `wandb sync` the runs later)."
        )


def agent_command(path: str, count: int | None, forward_signals: bool = False) -> list[str]:
    """The `wandb agent` command line one agent process runs; `forward_signals` in a launcher's
    job, where a cluster's warning signal reaches the agent and must reach its trial."""
    command = [sys.executable, "-m", "wandb", "agent", *([FORWARDING] if forward_signals else [])]
    if count is not None:
        command += ["--count", str(count)]
    return [*command, path]


def resumable_trial_command(command: list[str], directory: Path | None) -> list[str]:
    """The sweep's `command` with each trial in a directory of its W&B run id, under the sweep
    directory (`directory`, or <paths.output_dir>/sweeps/<sweep id>) as a local sweep's
    runs/<id>/, resumed from its checkpoint: a run the server hands out again after a
    preemption continues where it stopped. Hydra resolves the `${...}` in the trial."""
    sweep_dir = directory or "${paths.output_dir}/sweeps/${oc.env:WANDB_SWEEP_ID}"
    return [*command, f"hydra.run.dir={sweep_dir}/runs/${{oc.env:WANDB_RUN_ID}}", RESUME]


def _stop_scheduler(process: subprocess.Popen) -> int:
    """Ask the scheduler to finish its step (SIGINT, as Ctrl-C), SIGKILL it after a while."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            return process.wait(timeout=SCHEDULER_STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def _run_agents(
    path: str,
    count: int | None,
    agents: int,
    env: dict[str, str],
    cpus_per_trial: int | None,
    slots: list[list[str]],
    start_agents: StartAgents | None = None,
    where: Path | None = None,
) -> list[int]:
    """`agents` wandb agent processes, each on its CPU share and (with devices) its slot's GPUs,
    or as jobs of the user's Hydra launcher (`start_agents`, their job dirs under `where`);
    their exit codes once all have ended."""
    shares = cpu_share.plan_shares(cpu_share.process_limits(), agents, cpus_per_trial)[:agents]
    envs = [
        {**env, **share.env(), **gpu_slots.devices_env(slots[i % len(slots)] if slots else None)}
        for i, share in enumerate(shares)
    ]
    if start_agents is not None and where is not None:
        argv = agent_command(path, count, forward_signals=True)
        return start_agents([AgentJob(argv, env_added(e), os.getcwd()) for e in envs], where)
    argv, processes = agent_command(path, count), []
    for share, agent_env in zip(shares, envs, strict=True):
        with cpu_share.inherited_affinity(share.cores):  # its trials inherit the cores and env
            processes.append(subprocess.Popen(argv, env=agent_env))
    return [p.wait() for p in processes]


def _announce(sweep_id: str, path: str, slots: list[list[str]]) -> None:
    """The lines other machines run: `wandb agent`, and one per GPU slot of this machine."""
    print(f"sweep {sweep_id} on {base_url()}; run agents anywhere with:\n  wandb agent {path}")
    if slots:  # one agent per device slot, as this command starts them here
        print("one per GPU slot of a machine like this one:")
        for slot in slots:
            print(f"  {gpu_slots.ENV}={','.join(slot)} wandb agent {path}")


def _maybe_scheduler(
    config: dict[str, Any], path: str, agents: int, created: bool, env: dict[str, str]
) -> subprocess.Popen | None:
    """`wandb sweep-scheduler` beside the agents, for a sweep with a `scheduler:` block that
    this command created and runs agents for (its line printed for the record)."""
    if config.get("scheduler") is None:
        return None

    command = scheduler_command(path, max(agents, 1))
    print(
        "its runs come from W&B's sweep scheduler, on one machine only (the command that "
        f"creates the sweep with agents starts it):\n  {' '.join(command[2:])}",
        flush=True,
    )
    return subprocess.Popen(command, env=env) if agents > 0 and created else None


def _as_created(config: dict[str, Any], directory: Path | None) -> dict[str, Any]:
    """The configuration a new sweep hands wandb.sweep: each trial in its run's directory."""
    if not config.get("command"):  # W&B's default command runs a program
        return config
    return {**config, "command": resumable_trial_command(config["command"], directory)}


def _same_definition(
    config: dict[str, Any], sweep_id: str, layout: SweepLayout, directory: Path | None
) -> None:
    """Joining a sweep this machine created (its sweep.yaml here) with the command's definition
    is refused when that differs from the sweep's (drift.check), before any key is looked for."""
    if not layout.yaml.is_file():
        return
    created = yaml.safe_load(layout.yaml.read_text())
    drift.check(
        f"hydra.sweeper.sweep_id={sweep_id}",
        sweep_id,
        layout.yaml,
        created,
        wandb_view(_as_created(config, directory)),
        "drop hydra.sweeper.sweep_id",
    )


def run_server_sweep(
    config: dict[str, Any],
    options: SweepOptions,
    *,
    root: Path,
    directory: Path | None = None,
    devices: DevicePlan | None = None,
    hooks: AgentHooks | None = None,
) -> dict[str, Any]:
    """Create the sweep (or join `options.sweep_id`), print the agent line, run
    `options.agents` agents (None: one per device slot), each on its slot's GPUs (or as jobs of
    the user's Hydra launcher: `hooks.start_agents`), and wait. A new sweep's sweep.yaml goes
    into `directory` (hydra.sweep.dir) or <root>/sweeps/<id>/; `hooks.before_agents(layout)`
    runs before any agent starts (hydra.sweeper.prewarm)."""
    hooks = hooks or AgentHooks()
    project, entity, sweep_id = options.project, options.entity, options.sweep_id
    if sweep_id is not None:
        where = SweepLayout(directory) if directory else SweepLayout.under(root, sweep_id)
        _same_definition(config, sweep_id, where, directory)
    preflight()

    created = sweep_id is None  # its creator runs the sweep's scheduler, joiners do not
    if created:
        config = _as_created(config, directory)
        sweep_id = wandb.sweep(config, project=project, entity=entity)
    layout = SweepLayout(directory) if directory else SweepLayout.under(root, sweep_id)
    if created:
        write_sweep_yaml(config, layout.yaml)
    entity = entity or wandb.Api().default_entity
    path = f"{entity}/{project}/{sweep_id}"
    record_wandb(layout, path, base_url())  # `python -m trainer.sweep pause ID` reaches it
    slots = gpu_slots.fixed_slots(devices)
    _announce(sweep_id, path, slots)
    agents = gpu_slots.agent_count(options.agents, devices)
    if hooks.before_agents is not None:  # hydra.sweeper.prewarm: artifacts before any agent
        hooks.before_agents(layout)
    # Trials must report to the server (metrics feed bayes and hyperband): online, whatever
    # logger.mode says (the environment wins over it).
    env = {**os.environ, "WANDB_MODE": "online"}
    scheduler = _maybe_scheduler(config, path, agents, created, env)
    where = layout.root / JOB_DIR
    codes = _run_agents(
        path, options.count, agents, env, options.cpus_per_trial, slots, hooks.start_agents, where
    )
    result = {"sweep_id": sweep_id, "backend": "wandb", "path": path, "agent_exit_codes": codes}
    if scheduler is not None:
        result["scheduler_exit_code"] = _stop_scheduler(scheduler)
    return result
