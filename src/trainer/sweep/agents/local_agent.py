"""The local agent, the offline twin of `wandb agent`: claims runs from the sweep store, runs
each as a `python -m trainer` process with W&B's agent environment (forked from a pre-imported
trial template where it can), feeds its per-epoch metrics back, stops runs that hyperband stops
(SIGTERM), and records how each run ended."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainer.cache import env as cache_env
from trainer.errors import TrainerError
from trainer.sweep.agents import cpu_share, cpu_slots, gpu_slots
from trainer.sweep.agents.launched import WARNING_SIGNALS, ended_by_cluster
from trainer.sweep.agents.trial_start import Trial, TrialStarter
from trainer.sweep.definition.command import expand_trial_command
from trainer.sweep.search import dispatch, pbt_policy, space
from trainer.sweep.store import steering
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.directory import SweepLayout, sweep_id_of
from trainer.sweep.store.opening import open_store
from trainer.sweep.store.records import BUSY, STOP_BY_CANCEL, STOP_BY_OWNER, STOPPED_AS
from trainer.trial.pbt_files import Settings as PbtSettings
from trainer.trial.trial_params import wandb_agent_env

POLL_S = 0.25  # how often a running trial's metrics, stop flag and exit are checked
# how often the store hears that a run's agent is alive (and the agent, its owner's stop)
HEARTBEAT_S = steering.POLL_S
KILL_DELAY_S = 30.0  # SIGKILL a stopped run that has not exited this long after SIGTERM
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # forwarded to the running trial
# A cluster's warning before a time limit or preemption (SLURM's --signal; submitit sends
# SIGUSR2): the trial saves and stops (SIGTERM), its run goes back to the sweep as preempted,
# and the next agent to claim a run resumes it from its checkpoint.
PREEMPT_SIGNALS = WARNING_SIGNALS
TAIL_LINES = 30  # log lines kept in the store for a run that did not finish
DEVICE_WAIT_S = 0.5  # how often an agent whose devices are all taken looks again
# How often an agent with no run to take looks again while other agents' runs go on (one of
# them may be lost with its agent, job or host, and is then resumed here).
OTHERS_WAIT_S = 2.0
# How often an agent looks again at a sweep its owner paused (python -m trainer.sweep pause);
# a running run hears its owner's stop or cancel at its heartbeat (HEARTBEAT_S).
PAUSED_POLL_S = steering.POLL_S
STOPPED_BY = {STOP_BY_OWNER: "its owner", STOP_BY_CANCEL: "the sweep's cancel"}  # who stops a run


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


def _until_exit(trial: Trial, seconds: float) -> None:
    """Pause up to `seconds`, returning as soon as the trial exits (seen at once, not a poll
    interval later)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        trial.wait(timeout=seconds)


def _for_trial(signum: int) -> int:
    """The signal the running trial gets for one the agent got: a cluster's warning becomes
    SIGTERM (save and stop), SIGTERM and SIGINT pass as they are."""
    return signal.SIGTERM if signum in PREEMPT_SIGNALS else signum


def _final_state(
    code: int,
    stop_requested: bool,
    interrupted: bool = False,
    stopped: str = "stopped",
    preempted: bool = False,
) -> str:
    """How a trial ended; `stopped` names a run its engine stopped (hyperband: stopped, a
    scheduler optimizer's pruner: pruned); `preempted`: the cluster ended the agent's job (its
    warning, or SIGTERM inside a SLURM job): the run goes back to the sweep."""
    if preempted and code != 0:  # any agent resumes it (no --rerun-crashed needed)
        return "preempted"
    if interrupted:  # the agent was told to stop: the run did not finish, --rerun-crashed reruns it
        return "finished" if code == 0 else "crashed"
    if stop_requested and code in (0, 128 + signal.SIGTERM, -signal.SIGTERM, -signal.SIGKILL):
        return stopped
    if code == 0:
        return "finished"
    if code < 0:  # ended by a signal it did not handle
        return "crashed"
    return "failed"


def _pbt_settings(store: SweepStore, config: dict, layout: SweepLayout) -> PbtSettings | None:
    """A PBT sweep's member settings (None for another method): every member of every machine reports to the folder
    of the first agent (a shared file system); where this machine cannot see that folder, its
    members compare with its own members only, as it says."""
    if not pbt_policy.is_pbt(config):
        return None
    with store.transaction() as db:  # the first agent of any machine sets it, once
        folder = store.get(pbt_policy.FOLDER_KEY, db=db)
        if folder is None:
            folder = str(layout.pbt)
            store.set(pbt_policy.FOLDER_KEY, folder, db)
    if not Path(folder).parent.is_dir():
        print(
            f"agent: the sweep's PBT folder {folder} is not on this machine, so its members "
            f"report to {layout.pbt} and compare with this machine's members only; put the "
            "sweep folder on a file system every machine shares (hydra.sweep.dir) to make "
            "one population",
            flush=True,
        )
        folder = str(layout.pbt)
    return pbt_policy.member_settings(config, Path(folder))


class GaveUp(TrainerError):
    """Too many runs in a row failed: the agent stopped (exit 1); the message names them."""

    exit_code = 1


class LocalAgent:
    """Runs trials of one local sweep, one at a time, until the sweep or `count` ends."""

    def __init__(
        self,
        layout: SweepLayout,
        *,
        rerun_crashed: bool,
        max_consecutive_failures: int,
        cpus_per_trial: int | None = None,
        devices: list[str] | None = None,
        store: SweepStore | None = None,
        paused_wait_s: float | None = None,
    ) -> None:
        """`paused_wait_s`: how long it waits on a paused sweep before it exits 0 (an agent in
        a launcher job: hydra.sweeper.paused_wait_s); None: until the sweep is resumed."""
        self.layout = layout
        self.paused_wait_s = paused_wait_s
        self._paused_since: float | None = None  # when it found the sweep paused (monotonic)
        # the sweep's store: given (python -m trainer.agent --storage), else the one its
        # directory keeps or records (trainer.sweep.store.opening)
        self.store = store if store is not None else open_store(layout.root)
        self.sweep_id = sweep_id_of(self.store, layout)
        self.config: dict = self.store.config
        self.revision = space.revision(self.store)  # `extend` makes a new one: followed
        # claims runs and decides stops: classic (grid, random, bayes, hyperband) or optuna/ax
        self.engine = dispatch.for_sweep(self.store, layout, self.config, self.sweep_id)
        self.rerun_crashed = rerun_crashed
        self.max_consecutive_failures = max_consecutive_failures
        self.signum: int | None = None  # SIGTERM/SIGINT the agent received
        self._trial: Trial | None = None
        self.starter: TrialStarter | None = None  # starts trials (from the template when it can)
        self.cpus_per_trial = cpus_per_trial  # None: the sweep's setting, or an equal share
        self.share: cpu_share.Share | None = None  # this agent's CPUs (its slot in the store)
        # The GPUs its trials may take (the sweep's, or its own --devices); None: not assigned.
        self.pool = gpu_slots.agent_pool(self.store.get("devices"), devices)
        # method: pbt: what its trials are told, and what the agent answers their reports with
        self.pbt = _pbt_settings(self.store, self.config, layout)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Forward SIGTERM/SIGINT to the running trial once (it saves and exits; a cluster's
        warning signal is forwarded as SIGTERM); the watch loop then waits for it, records how
        it ended, and the agent exits 128 + signum."""
        trial = self._trial  # read its state only: the watch loop owns poll()
        if self.signum is None and trial is not None and trial.returncode is None:
            why = " (a time limit or preemption is near)" if signum in PREEMPT_SIGNALS else ""
            print(
                f"agent: {signal.Signals(signum).name} received{why}, stopping the running "
                f"trial (SIGKILL in {KILL_DELAY_S:g} s if it has not exited)",
                flush=True,
            )
            trial.send_signal(_for_trial(signum))
        self.signum = self.signum or signum

    def run(self, count: int | None = None) -> int:
        """Run trials; return 0 when the sweep (or `count`) is done, 128 + signum after
        SIGTERM/SIGINT (the running trial is stopped and recorded); raise GaveUp after too many
        failures in a row."""
        if threading.current_thread() is threading.main_thread():
            signals = (*STOP_SIGNALS, *PREEMPT_SIGNALS)
            previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        else:
            previous = {}
        try:
            self.share = cpu_slots.claim_share(
                self.store,
                per_trial=self.cpus_per_trial,
                stop=lambda: self.signum is not None,
            )
            if not self.share:
                return 128 + (self.signum or signal.SIGTERM)
            self.starter = TrialStarter(  # the template's environment is the trials' (bundle too)
                {
                    **os.environ,
                    **self.share.env(),
                    **cache_env.sweep_bundle_env(self.layout.compile_cache),
                },
                self.share.cores,
                self.layout.template_log(os.getpid()),
                command=self.config.get("command"),
            )
            # Before the first claim, so that a run is handed out when it can start: the
            # command's expansion imports wandb (about 0.6 s) while the template imports, and
            # the template is ready.
            expand_trial_command(self.config, {}, self.layout.root)
            self.starter.wait_ready(stop=lambda: self.signum is not None)
            return self._run(count)
        finally:
            self.engine.close()  # a scheduler optimizer's lease goes to another agent
            if self.starter is not None:
                self.starter.close()
            cpu_slots.release_share(self.store)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, count: int | None) -> int:
        done, waited, waiting = 0, False, False
        failures: list[RunRecord] = []
        while self.signum is None and (count is None or done < count):
            obeyed = self._obey_owner(done)  # paused: wait; stopped, cancelled: exit
            if obeyed == "exit":
                return 0
            if obeyed == "wait":
                continue
            self._follow_revision()
            run = self.engine.claim(
                agent_pid=os.getpid(),
                rerun_crashed=self.rerun_crashed,
                pool=self.pool,
                stop=lambda: self.signum is not None or self._halted() or self._revised(),
            )
            if run is BUSY:  # every device it may use runs a trial: wait for one to end
                if not waited:
                    print("agent: every device it may use runs a trial; waiting", flush=True)
                waited = True
                time.sleep(DEVICE_WAIT_S)
                continue
            waited = False
            if run is None and self.signum is not None:  # stopped while waiting for a run
                return 128 + self.signum
            if run is None and (self._halted() or self._revised()):  # steered or extended
                continue
            if run is None and self._others_go_on(waiting):
                waiting = True
                continue
            if run is None and self.signum is not None:  # stopped while waiting for the others
                return 128 + self.signum
            if run is None:
                print(
                    f"agent: sweep {self.sweep_id} has no more runs to hand out "
                    f"({done} run(s) by this agent)",
                    flush=True,
                )
                break
            waiting = False
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
                    raise GaveUp(
                        f"agent: {len(failures)} consecutive runs failed, giving up "
                        f"(max_consecutive_failures={self.max_consecutive_failures}):\n{names}",
                    )
            else:
                failures = []
        return 0

    def _obey_owner(self, done: int) -> str:
        """Before a claim, what its owner's state of the sweep says: `claim`; `wait` (paused,
        one poll waited); `exit` (stopped or cancelled, or paused for `paused_wait_s`)."""
        state, change = self.store.lifecycle()
        if state == steering.PAUSED:
            self._paused_since = self._paused(change, self._paused_since)
            return "wait" if self._paused_since is not None else "exit"
        if self._paused_since is not None:
            print(f"agent: sweep {self.sweep_id} resumed; claiming runs again", flush=True)
            self._paused_since = None
        if state in steering.HALTED:  # stopped or cancelled by its owner
            print(
                f"agent: sweep {self.sweep_id} was {change.said() if change else state}: "
                f"no new run; exiting ({done} run(s) by this agent)",
                flush=True,
            )
            return "exit"
        return "claim"

    def _revised(self) -> bool:
        """Whether `extend` changed the sweep's definition since this agent read it."""
        return space.revision(self.store) != self.revision

    def _follow_revision(self) -> None:
        """Before a claim: after `extend`, the new definition and an engine built from it
        (told the stored runs inside the new space), without restarting the agent."""
        revision = space.revision(self.store)
        if revision == self.revision:
            return
        self.engine.close()  # a scheduler optimizer's lease: the rebuilt engine takes it
        self.config, self.revision = self.store.config, revision
        self.engine = dispatch.for_sweep(self.store, self.layout, self.config, self.sweep_id)
        print(
            f"agent: sweep {self.sweep_id} was extended (revision {revision}); claiming runs "
            "of its new definition",
            flush=True,
        )

    def _halted(self) -> bool:
        """Whether its owner has paused, stopped or cancelled the sweep."""
        return self.store.lifecycle()[0] in steering.HALTED

    def _paused(self, change: steering.Change | None, since: float | None) -> float | None:
        """One poll of a paused sweep: say so once, keep its CPU slot alive, wait PAUSED_POLL_S.
        Returns when it started waiting, or None once it has waited `paused_wait_s` (an agent
        in a launcher job leaves rather than hold its allocation idle)."""
        now = time.monotonic()
        how = change.said() if change else "paused"
        resume = f"python -m trainer.sweep resume {self.sweep_id}"
        if since is None:
            limit = "" if self.paused_wait_s is None else f" (at most {self.paused_wait_s:g} s)"
            print(
                f"agent: sweep {self.sweep_id} is {how}: no new run; waiting{limit} for {resume}",
                flush=True,
            )
            since = now
        elif self.paused_wait_s is not None and now - since >= self.paused_wait_s:
            print(
                f"agent: sweep {self.sweep_id} is still {how} after {self.paused_wait_s:g} s "
                "(hydra.sweeper.paused_wait_s); exiting so this job holds no idle allocation. "
                f"After {resume}, bring agents back with python -m trainer.agent {self.sweep_id} "
                "(or the sweep command with hydra.sweeper.sweep_id)",
                flush=True,
            )
            return None
        self.store.beat_agent(os.getpid())
        deadline = now + PAUSED_POLL_S
        while self.signum is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return since

    def _others_go_on(self, said: bool) -> bool:
        """With no run to take: whether other agents' runs still go on. The agent then waits a
        while and looks again, so that a run lost with its agent, job or host is resumed here
        (told once, `said`), and leaves only when the sweep has nothing running."""
        others = self.store.running_elsewhere()
        if not others:
            return False
        if not said:
            print(
                f"agent: no run to hand out now; {len(others)} run(s) of other agents go on "
                f"({', '.join(r.id for r in others)}): waiting, to resume any that is lost",
                flush=True,
            )
        deadline = time.monotonic() + OTHERS_WAIT_S
        while self.signum is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.signum is None

    def _run_trial(self, run: RunRecord) -> str:
        files = self.layout.run(run.id)
        run_dir = files.root
        log_path = self.layout.log(run.id)
        params_path = self.layout.params(run.id)
        for folder in (run_dir, log_path.parent, params_path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        argv = expand_trial_command(self.config, run.params, run_dir)
        # handed out again (preempted, lost, interrupted): it continues from its own last.pt
        resume = files.last.is_file()
        argv += ["trainer.resume=auto"] if resume else []
        env = {
            **wandb_agent_env(self.sweep_id, run.id, run.params, params_path, run_dir),
            **self.share.env(),
            **gpu_slots.devices_env(run.devices),
            **cache_env.sweep_bundle_env(self.layout.compile_cache),  # its compile-cache bundle
            **(self.pbt.to_env() if self.pbt else {}),  # method: pbt
        }
        verb = "resuming" if resume else "starting"
        where = f" on GPU {','.join(run.devices)}" if run.devices else ""
        print(f"agent: {verb} run {run.id}{where} with {json.dumps(run.params)}", flush=True)
        with open(log_path, "a") as log:  # a run handed out again keeps its earlier lines
            log.write(" ".join(argv) + "\n")
            log.flush()
            proc = self.starter.start(argv, env, log, self.share.cores)
        self._trial = proc
        if self.signum is not None:  # a signal came while the trial was starting
            proc.send_signal(_for_trial(self.signum))
        self.store.update(
            run.id,
            pid=proc.pid,
            run_dir=str(run_dir),
            log_path=str(log_path),
            started_at=time.time(),
        )
        try:
            code = self._watch(run.id, proc, files.metrics)
        except BaseException:  # the agent itself fails (or is interrupted): the run is lost
            proc.kill()
            self.store.update_held(run.id, os.getpid(), state="crashed", ended_at=time.time())
            raise
        finally:
            self._trial = None
        return self._record(run, code, read_summary(files.summary), log_path)

    def _record(self, run: RunRecord, code: int, summary: Any, log_path: Path) -> str:
        """Record how the trial of `run` ended (exit `code`); return its state."""
        asked = self.store.stop_requested(run.id)  # by its engine, its owner, or a cancel
        state = _final_state(
            code,
            bool(asked),
            self.signum is not None,
            STOPPED_AS.get(asked, self.engine.stopped_state),
            preempted=ended_by_cluster(self.signum),
        )
        held = self.store.update_held(
            run.id,
            os.getpid(),
            state=state,
            preemptions=run.preemptions + (state == "preempted"),
            exit_code=code,
            ended_at=time.time(),
            summary=summary,
            log_tail=None if state == "finished" else _tail(log_path),
        )
        if not held:  # taken for lost while it went on (its agent stopped or silent too long)
            print(
                f"agent: run {run.id} went to another agent meanwhile (this agent was taken for "
                f"lost); its end here (exit code {code}) is not recorded",
                flush=True,
            )
            return "lost"
        why = "diverged, " if (summary or {}).get("status") == "diverged" else ""
        print(f"agent: run {run.id} {state} ({why}exit code {code}), log {log_path}", flush=True)
        return state

    def _watch(self, run_id: str, proc: Trial, metrics_path: Path) -> int:
        """Feed metrics.jsonl into the store as it grows; answer a PBT member's reports; SIGTERM
        the run when its engine stops it (hyperband, or a scheduler optimizer's pruner), or its
        owner does (a stop of the run, or the sweep's cancel: heard at the heartbeat)."""
        offset, epochs, sigterm_at, beat = 0, 0, None, time.monotonic()
        asked = 0  # who asked the run to stop, as the heartbeat read it (records.STOP_BY_*)
        while True:
            code = proc.poll()
            offset, epochs = self._read_metrics(run_id, metrics_path, offset, epochs)
            if code is not None:
                return code
            if self.pbt is not None:  # a PBT member waits for the answer to its report
                pbt_policy.answer_reports(self.pbt, run_id)
            if time.monotonic() - beat > HEARTBEAT_S:
                asked = self.store.heartbeat(run_id)
                beat = time.monotonic()
            if sigterm_at is None and (asked in STOPPED_AS or self.engine.should_stop(run_id)):
                asked = asked or self.store.stop_requested(run_id)  # who: the engine, or not
                why = STOPPED_BY.get(asked, self.engine.stop_reason)
                print(f"agent: {why} stops run {run_id} (SIGTERM)", flush=True)
                proc.send_signal(signal.SIGTERM)
                sigterm_at = time.monotonic()
            elif sigterm_at is not None and time.monotonic() - sigterm_at > KILL_DELAY_S:
                proc.kill()
            if self.signum is not None and sigterm_at is None:
                sigterm_at = time.monotonic()  # forwarded by _on_signal: SIGKILL after the delay
            _until_exit(proc, POLL_S)

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
