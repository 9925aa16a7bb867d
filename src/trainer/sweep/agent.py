"""The local agent, the offline twin of `wandb agent`: claims runs from the sweep store, runs
each as a `python -m trainer` subprocess with W&B's agent environment, feeds its per-epoch
metrics back, stops runs that hyperband stops (SIGTERM), and records how each run ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainer import cpu_share
from trainer.layout import default_output_root
from trainer.sweep import cpu_slots, engine
from trainer.sweep.store import RunRecord, SweepStore

POLL_S = 0.25  # how often a running trial's metrics, stop flag and exit are checked
HEARTBEAT_S = 2.0  # how often the store hears that a run's agent is alive
KILL_DELAY_S = 30.0  # SIGKILL a stopped run that has not exited this long after SIGTERM
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # forwarded to the running trial
TAIL_LINES = 30  # log lines kept in the store for a run that did not finish


def output_root() -> Path:
    """Where sweeps live by default: conf/paths/default.yaml's output_dir, resolved."""
    return default_output_root()


def sweep_dir(root: str | Path, sweep_id: str) -> Path:
    return Path(root) / "sweeps" / sweep_id


def join_command(sweep_id: str, root: str | Path) -> str:
    """The command that joins this sweep from another terminal (--root only when needed)."""
    command = f"python -m trainer.agent {sweep_id}"
    if Path(root).resolve() != output_root().resolve():
        command += f" --root {root}"
    return command


class UnknownSweep(FileNotFoundError):
    """A sweep id with no local sweep store; the message names `key` and the known sweeps."""

    def __init__(self, key: str, sweep_id: str, root: str | Path) -> None:
        sweeps = Path(root) / "sweeps"
        known = sorted(db.parent.name for db in sweeps.glob("*/sweep.db"))
        listing = (
            f"the local sweeps there are: {', '.join(known)}"
            if known
            else "there are no local sweeps there"
        )
        super().__init__(
            f"{key}={sweep_id}: no local sweep {sweep_id!r} under {sweeps}; {listing} "
            "(list them with python -m trainer.sweep ls). Check the id, and the output root "
            "(--root, or TRAINER_OUTPUT_DIR / paths.output_dir)."
        )


def new_id() -> str:
    """A short random id like W&B's (8 lowercase alphanumerics)."""
    from wandb.sdk.lib.runid import generate_id

    return generate_id(8)


def trial_command(config: dict, params: dict[str, Any], run_dir: Path) -> list[str]:
    """The sweep's `command` expanded exactly as `wandb agent` expands it, plus the run dir."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = sweep_utils.create_sweep_command(list(config.get("command") or []))
    sweep_vars = sweep_utils.create_sweep_command_args(
        {"args": {k: {"value": v} for k, v in params.items()}}
    )
    sweep_vars["interpreter"] = [sys.executable]
    sweep_vars["program"] = [config.get("program", "")]
    sweep_vars["env"] = ["/usr/bin/env"]
    argv: list[str] = []
    for chunk in command:
        chunk = str(chunk)
        if chunk.startswith("${") and chunk.endswith("}"):
            argv += sweep_vars.get(chunk[2:-1]) or []
        else:
            argv.append(chunk)
    return [*argv, f"hydra.run.dir={run_dir}"]


def fixed_overrides(config: dict) -> list[str]:
    """The overrides of `command` given to every trial (everything after the macros)."""
    command = [str(c) for c in config.get("command") or []]
    if "${args_no_hyphens}" in command:
        command = command[command.index("${args_no_hyphens}") + 1 :]
    return [c for c in command if not (c.startswith("${") and c.endswith("}"))]


def trial_env(sweep_id: str, run: RunRecord, params_path: Path, run_dir: Path) -> dict[str, str]:
    """The environment `wandb agent` gives its children, W&B offline, grouped by sweep."""
    from wandb.sdk.lib import config_util

    config_util.save_config_file_from_dict(
        str(params_path), {k: {"value": v} for k, v in run.params.items()}
    )
    env = dict(os.environ)
    env.update(
        WANDB_RUN_ID=run.id,
        WANDB_SWEEP_ID=sweep_id,
        WANDB_SWEEP_PARAM_PATH=str(params_path),
        WANDB_DIR=str(run_dir),
        WANDB_RUN_GROUP=sweep_id,
        WANDB_MODE="offline",
    )
    return env


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def read_summary(path: Path) -> dict | None:
    """A run's summary.json, or None when it is missing, unreadable or torn (with a warning)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(f"agent: warning: ignoring unreadable summary {path}: {err}", file=sys.stderr)
        return None


def _final_state(code: int, stop_requested: bool, interrupted: bool = False) -> str:
    if interrupted:  # the agent was told to stop: the run did not finish, --rerun-crashed reruns it
        return "finished" if code == 0 else "crashed"
    if stop_requested and code in (0, 128 + signal.SIGTERM, -signal.SIGTERM, -signal.SIGKILL):
        return "stopped"
    if code == 0:
        return "finished"
    if code < 0:  # ended by a signal it did not handle
        return "crashed"
    return "failed"


class LocalAgent:
    """Runs trials of one local sweep, one at a time, until the sweep or `count` ends."""

    def __init__(
        self,
        sweep_id: str,
        *,
        root: str | Path | None = None,
        rerun_crashed: bool = False,
        max_consecutive_failures: int = 5,
        cpus_per_trial: int | None = None,
    ) -> None:
        self.sweep_id = sweep_id
        self.dir = sweep_dir(root if root is not None else output_root(), sweep_id)
        db = self.dir / "sweep.db"
        if not db.is_file():
            raise UnknownSweep("sweep_id", sweep_id, self.dir.parent.parent)
        self.store = SweepStore(db)
        self.config: dict = self.store.config
        self.early_terminate = bool(self.config.get("early_terminate"))
        self.rerun_crashed = rerun_crashed
        self.max_consecutive_failures = max_consecutive_failures
        self.signum: int | None = None  # SIGTERM/SIGINT the agent received
        self._trial: subprocess.Popen | None = None
        self.cpus_per_trial = cpus_per_trial  # None: the sweep's setting, or an equal share
        self.share: cpu_share.Share | None = None  # this agent's CPUs (cpu_slots.json)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Forward SIGTERM/SIGINT to the running trial once (it saves and exits); the watch
        loop then waits for it, records how it ended, and the agent exits 128 + signum."""
        if self.signum is None and self._trial is not None and self._trial.poll() is None:
            print(
                f"agent: {signal.Signals(signum).name} received, stopping the running trial "
                f"(SIGKILL in {KILL_DELAY_S:g} s if it has not exited)",
                flush=True,
            )
            self._trial.send_signal(signum)
        self.signum = self.signum or signum

    def run(self, count: int | None = None) -> int:
        """Run trials; return 0 when the sweep (or `count`) is done, 1 after too many failures,
        128 + signum after SIGTERM/SIGINT (the running trial is stopped and recorded)."""
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        else:
            previous = {}
        try:
            self.share = cpu_slots.claim_share(
                self.dir, per_trial=self.cpus_per_trial, stop=lambda: self.signum is not None
            )
            return self._run(count) if self.share else 128 + (self.signum or signal.SIGTERM)
        finally:
            cpu_slots.release_share(self.dir)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, count: int | None) -> int:
        self.store.mark_lost_runs()
        done = 0
        failures: list[RunRecord] = []
        while self.signum is None and (count is None or done < count):
            run = self.store.claim(
                lambda runs: engine.next_params(self.config, runs),
                new_id=new_id,
                agent_pid=os.getpid(),
                rerun_crashed=self.rerun_crashed,
            )
            if run is None:
                print(
                    f"agent: sweep {self.sweep_id} has no more runs to hand out "
                    f"({done} run(s) by this agent)",
                    flush=True,
                )
                break
            state = self._run_trial(run)
            done += 1
            if self.signum is not None:
                return 128 + self.signum
            if state in ("failed", "crashed"):
                failures.append(self.store.run(run.id))
                if len(failures) >= self.max_consecutive_failures:
                    names = "\n".join(
                        f"  {r.id}: {r.state}, exit code {r.exit_code}, log {r.log_path}"
                        for r in failures
                    )
                    print(
                        f"agent: {len(failures)} consecutive runs failed, giving up "
                        f"(max_consecutive_failures={self.max_consecutive_failures}):\n{names}",
                        file=sys.stderr,
                        flush=True,
                    )
                    return 1
            else:
                failures = []
        return 0

    def _run_trial(self, run: RunRecord) -> str:
        run_dir = self.dir / "runs" / run.id
        log_path = self.dir / "logs" / f"{run.id}.log"
        params_path = self.dir / "params" / f"{run.id}.yaml"
        for folder in (run_dir, log_path.parent, params_path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        argv = trial_command(self.config, run.params, run_dir)
        env = {**trial_env(self.sweep_id, run, params_path, run_dir), **self.share.env()}
        print(f"agent: starting run {run.id} with {json.dumps(run.params)}", flush=True)
        with open(log_path, "w") as log:
            log.write(" ".join(argv) + "\n")
            log.flush()
            # Its own session: a terminal's Ctrl-C reaches the agent only, which forwards it once
            # (a second SIGINT would abort the trial's graceful save).
            with cpu_share.inherited_affinity(self.share.cores):  # the trial runs on its cores
                proc = subprocess.Popen(
                    argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        self._trial = proc
        if self.signum is not None:  # a signal came while the trial was starting
            proc.send_signal(self.signum)
        self.store.update(
            run.id,
            pid=proc.pid,
            run_dir=str(run_dir),
            log_path=str(log_path),
            started_at=time.time(),
        )
        try:
            code = self._watch(run.id, proc, run_dir / "metrics.jsonl")
        except BaseException:  # the agent itself fails (or is interrupted): the run is lost
            proc.kill()
            self.store.update(run.id, state="crashed", ended_at=time.time(), pid=None)
            raise
        finally:
            self._trial = None
        stop_requested = self.store.stop_requested(run.id)
        state = _final_state(code, stop_requested, interrupted=self.signum is not None)
        summary = read_summary(run_dir / "summary.json")
        self.store.update(
            run.id,
            state=state,
            exit_code=code,
            ended_at=time.time(),
            summary=summary,
            log_tail=None if state == "finished" else _tail(log_path),
        )
        print(f"agent: run {run.id} {state} (exit code {code}), log {log_path}", flush=True)
        return state

    def _watch(self, run_id: str, proc: subprocess.Popen, metrics_path: Path) -> int:
        """Feed metrics.jsonl into the store as it grows; SIGTERM the run if hyperband says so."""
        offset, epochs, sigterm_at, beat = 0, 0, None, time.monotonic()
        while True:
            code = proc.poll()
            offset, epochs = self._read_metrics(run_id, metrics_path, offset, epochs)
            if code is not None:
                return code
            if time.monotonic() - beat > HEARTBEAT_S:
                self.store.heartbeat(run_id)
                beat = time.monotonic()
            if sigterm_at is None and self.early_terminate:
                to_stop = engine.runs_to_stop(self.config, self.store.runs())
                if to_stop:
                    self.store.request_stop(to_stop)
                if self.store.stop_requested(run_id):
                    print(f"agent: early_terminate stops run {run_id} (SIGTERM)", flush=True)
                    proc.send_signal(signal.SIGTERM)
                    sigterm_at = time.monotonic()
            elif sigterm_at is not None and time.monotonic() - sigterm_at > KILL_DELAY_S:
                proc.kill()
            if self.signum is not None and sigterm_at is None:
                sigterm_at = time.monotonic()  # forwarded by _on_signal: SIGKILL after the delay
            time.sleep(POLL_S)

    def _read_metrics(self, run_id: str, path: Path, offset: int, epochs: int) -> tuple[int, int]:
        try:
            with open(path) as handle:
                handle.seek(offset)
                chunk = handle.read()
        except FileNotFoundError:
            return offset, epochs
        complete = chunk[: chunk.rfind("\n") + 1]  # a line still being written waits
        rows = [json.loads(line) for line in complete.splitlines() if line.strip()]
        if rows:
            self.store.add_metrics(run_id, rows, epochs)
        return offset + len(complete.encode()), epochs + len(rows)
