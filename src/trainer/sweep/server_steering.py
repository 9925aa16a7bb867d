"""W&B's verbs on a sweep of the W&B server (backend=wandb): the sweep's state changes through
W&B's own command, `wandb sweep --pause | --resume | --stop | --cancel ENTITY/PROJECT/SWEEP_ID`
(W&B's public API has no call for it), and `stop SWEEP RUN...` is W&B's "Stop run", through
its public API (`wandb.Api().sweep(path).runs`, `Run.stop()`)."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys

import wandb
from wandb.errors import CommError

from trainer.errors import TrainerError
from trainer.sweep import server
from trainer.sweep.store import steering

# W&B's sweep states (the public API's Sweep.state) as the states the verbs act on; FINISHED
# (what `wandb sweep --stop` leads to), FAILED and CRASHED have ended.
STATES = {
    "PENDING": steering.RUNNING,
    "RUNNING": steering.RUNNING,
    "PAUSED": steering.PAUSED,
    "CANCELED": steering.CANCELLED,
}
STOPPABLE = ("running",)  # a run's stop flag reaches only a live process (its heartbeat)
COMMAND_TIMEOUT_S = 120.0
# What W&B's agents (`wandb agent`) do at their next heartbeat, verb by verb.
OBEYED = {
    "pause": "no new run is handed out; running runs go on; agents wait",
    "resume": "agents get runs again",
    "stop": "no new run is handed out; running runs finish; the sweep ends FINISHED",
    "cancel": "W&B's agents stop their running runs now (SIGTERM: each saves its last.pt); the "
    "sweep ends CANCELED",
}


def sweep_command(verb: str, path: str) -> list[str]:
    """W&B's own command for `verb`, run by this interpreter's wandb."""
    return [sys.executable, "-m", "wandb", "sweep", f"--{verb}", path]


def _reached(path: str, url: str) -> str:
    """The server's URL once a key is found and it answers; TrainerError (exit 2 without a
    key, 1 when it cannot be reached) otherwise, within seconds."""
    url = url or server.base_url()
    try:
        server.preflight(url)
    except server.ServerUnavailable as err:
        raise TrainerError(
            f"{err} ({path} is a W&B sweep: its verbs go to the W&B server.)",
            exit_code=err.exit_code,
        ) from None
    return url


def _sweep(path: str):
    """The public API's sweep of `path`; exit 2 when the server has none."""
    try:
        return wandb.Api().sweep(path)
    except (CommError, ValueError) as err:
        raise TrainerError(
            f"no W&B sweep {path} ({err}); give it as ENTITY/PROJECT/SWEEP_ID, as `wandb agent` "
            "takes it. Nothing was changed."
        ) from None


def _refusal(verb: str, path: str, state: str) -> str:
    allowed = [s.upper() for s in steering.TRANSITIONS[verb]]
    return (
        f"{verb} {path}: W&B says the sweep is {state}; {verb} applies to a sweep that is "
        f"{' or '.join(allowed)}. Nothing was changed."
    )


def change_state(verb: str, path: str, url: str = "") -> str:
    """Pause, resume, stop or cancel the W&B sweep `path` with W&B's own command; what it did.
    A verb that does not apply to the sweep's state is refused first (exit 2)."""
    url = _reached(path, url)
    state = str(_sweep(path).state).upper()
    if STATES.get(state) not in steering.TRANSITIONS[verb]:
        raise steering.SteerError(_refusal(verb, path, state))
    argv = sweep_command(verb, path)
    env = {**os.environ, "WANDB_MODE": "online", "WANDB_BASE_URL": url}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    said = " ".join(argv[2:])
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise TrainerError(f"{said} failed (exit code {done.returncode}): {tail}", exit_code=1)
    return (
        f"sweep {path}: {steering.DONE[verb]} on {url} by {steering.who()}, with W&B's own "
        f"`{said}`. {OBEYED[verb][0].upper()}{OBEYED[verb][1:]} within an agent's heartbeat; "
        "W&B's page of the sweep shows its state."
    )


def stop_runs(path: str, run_ids: list[str], url: str = "") -> list[str]:
    """W&B's "Stop run" for each named run of the sweep `path`: the server flags it and the
    run's own process ends it at its next heartbeat. Every id is checked first: an unknown one
    (did you mean) or a run not running is refused (exit 2) and nothing is stopped."""
    _reached(path, url)
    runs = {run.id: run for run in _sweep(path).runs}
    missing = [run_id for run_id in run_ids if run_id not in runs]
    if missing:
        hints = []
        for run_id in missing:
            close = difflib.get_close_matches(run_id, list(runs), n=1)
            hints.append(f"{run_id} (did you mean {close[0]}?)" if close else run_id)
        raise steering.SteerError(
            f"stop {path}: no run {', '.join(hints)} in the W&B sweep ({len(runs)} run(s)); "
            "see them on its W&B page. Nothing was stopped."
        )
    ended = {i: runs[i].state for i in run_ids if runs[i].state not in STOPPABLE}
    if ended:
        said = ", ".join(f"{run_id} ({state})" for run_id, state in ended.items())
        raise steering.SteerError(
            f"stop {path}: {said} not running; W&B stops only a running run. Nothing was stopped."
        )
    for run_id in run_ids:
        runs[run_id].stop()
    return [
        f"sweep {path}: run {run_id} flagged to stop (W&B's Stop run): at its next heartbeat "
        "its own wandb interrupts the trial (SIGINT), which saves its last.pt and exits"
        for run_id in run_ids
    ]
