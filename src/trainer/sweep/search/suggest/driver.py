"""Drives a sweep's W&B scheduler optimizer (optuna, ax) from the local store. The lease holder
tells it each run's epochs and end, stops the runs its pruner prunes and queues its suggestions
for waiting agents; an agent that takes over a lapsed lease rebuilds it from the stored runs."""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from sqlalchemy import Connection

from trainer.sweep.search import space
from trainer.sweep.search.custom_method import engine_of
from trainer.sweep.search.repeats import Repeats, collapsed, configurations, proposer
from trainer.sweep.search.suggest.wandb_door import OptimizerSession, TrialView
from trainer.sweep.store.database import TERMINAL, RunRecord, SweepStore
from trainer.sweep.store.directory import SweepLayout, new_id
from trainer.sweep.store.reconnect import retrying
from trainer.sweep.store.records import Busy
from trainer.sweep.store.suggestions import SuggestionQueue

DRIVE_S = 1.0  # the holder tells the optimizer about the runs at most this often
WAIT_S = 0.5  # an agent waiting for a suggestion looks again after this long


def optimizer_log(layout: SweepLayout, sweep_id: str) -> logging.Logger:
    """The log of the optimizer's own messages (logs/optimizer.log), never the terminal."""
    log = logging.getLogger(f"trainer.sweep.optimizer.{sweep_id}.{os.getpid()}")
    if not log.handlers:
        layout.optimizer_log.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(layout.optimizer_log)
        handler.setFormatter(logging.Formatter("%(asctime)s pid %(process)d %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


class SchedulerDriver:
    """This process's part in driving the optimizer: hold (or take over) the lease, then keep
    the optimizer in step with the store."""

    def __init__(self, store: SweepStore, layout: SweepLayout, config: dict, sweep_id: str):
        self.store, self.queue = store, SuggestionQueue(store)
        self.config, self.sweep_id = config, sweep_id
        self.revision = space.revision(store)  # `extend` makes a new one: rebuilt from it
        self.prior = space.prior_runs(store, config)  # hydra.sweeper.warm_start's runs
        self.engine = str(engine_of(config))
        self.log = optimizer_log(layout, sweep_id)
        self.token = uuid.uuid4().hex
        self.repeats = Repeats.of_store(store)  # told one mean per configuration, no pruning
        self.session: OptimizerSession | None = None  # told the store's runs: ours to drive
        self.spare: OptimizerSession | None = None  # built, told nothing: for a takeover
        self.generation: int | None = None
        self._last = 0.0
        self._reset()

    def _reset(self) -> None:
        self.tracked: dict[str, str] = {}  # run id -> optimizer id, runs not yet ended
        self.queued: dict[int, str] = {}  # suggestion seq -> optimizer id
        self.told: dict[str, tuple[str, int]] = {}  # run id -> (state, epochs) last told

    @retrying
    def step(self, force: bool = False) -> None:
        """Drive the optimizer once if this process holds the lease or may take it."""
        if not force and time.monotonic() - self._last < DRIVE_S:
            return
        self._last = time.monotonic()
        if self.session is None and self.spare is None and self.queue.takeable():
            self.spare = OptimizerSession(self.config, self.sweep_id, self.log)  # no lock held
        if self.session is None and self.spare is None:
            return
        try:
            with self.store.transaction() as db:
                generation = self.queue.hold(db, self.token, os.getpid())
                if generation is None:
                    self._drop()  # another process drives (or took over from us)
                    return
                self._follow(space.revision(self.store, db))
                if generation != self.generation:
                    self._take_over(generation)
                self._sync(db)
        except BaseException:
            self._drop()  # half-told: the next step rebuilds from the store
            raise

    def _take_over(self, generation: int) -> None:
        self._drop()
        self.session = self.spare or OptimizerSession(self.config, self.sweep_id, self.log)
        self.spare, self.generation = None, generation
        self.log.info("lease generation %d: rebuilding the optimizer from the store", generation)

    def _follow(self, revision: int) -> None:
        """The sweep was extended (a new revision of its definition): drop the optimizer built
        for the old one; the next take-over rebuilds it from the new space and tells it the
        stored runs inside it."""
        if revision == self.revision:
            return
        self.log.info("sweep definition revision %d: rebuilding the optimizer", revision)
        self._drop()
        if self.spare is not None:
            self.spare.close()
            self.spare = None
        self.config, self.revision = self.store.config, revision
        self.prior = space.prior_runs(self.store, self.config)

    def _drop(self) -> None:
        if self.session is not None:
            self.session.close()
        self.session, self.generation = None, None
        self._reset()

    def _sync(self, db: Connection) -> None:
        every = [r for r in self.store.runs() if not r.superseded]
        if self.repeats is not None:  # one run per configuration: the mean once all ended
            every = collapsed(configurations(every), self.repeats, self.config.get("metric"))
        runs = space.told(self.config, every)  # those inside the space (an extended sweep's)
        for prior in self.prior:  # a warm start's runs, taught once per optimizer
            if prior.id not in self.told:
                self.session.tell_finished(
                    TrialView(prior.id, prior.params, "finished", prior.history)
                )
                self.told[prior.id] = ("finished", len(prior.history))
        for suggestion in self.queue.queued(db):  # queued by an earlier holder: adopt them
            if suggestion.seq not in self.queued:
                view = TrialView(f"queued-{suggestion.seq}", suggestion.params, "queued")
                adopted = self.session.adopt(view)
                if adopted is not None:
                    self.queued[suggestion.seq] = adopted
        for run in runs:
            self._tell(run)
        self._prune(db, runs)
        self._ask(db, runs, len(every))

    def _tell(self, run: RunRecord) -> None:
        """Tell the optimizer what changed in `run`: claimed suggestions become tracked runs,
        runs it never suggested are adopted (running) or taught (ended)."""
        view = TrialView(run.id, run.params, run.state, run.history)
        seen = (run.state, len(run.history))
        seq = (run.search_info or {}).get("suggestion")
        if run.id not in self.tracked and seq in self.queued and run.id not in self.told:
            self.tracked[run.id] = self.queued.pop(seq)
        if run.id not in self.tracked:
            if run.state == "running":
                adopted = self.session.adopt(view)
                if adopted is not None:
                    self.tracked[run.id] = adopted
            elif run.state in TERMINAL and self.told.get(run.id, ("",))[0] != run.state:
                self.session.tell_finished(view)
                self.told[run.id] = seen
            if run.id not in self.tracked:
                return
        if self.told.get(run.id) != seen:
            self.session.tell(self.tracked[run.id], view)
            self.told[run.id] = seen
        if run.state in TERMINAL:
            del self.tracked[run.id]

    def _prune(self, db: Connection, runs: list[RunRecord]) -> None:
        if self.repeats is not None:  # a configuration is judged on all its seeds' ends
            return
        candidates = {
            self.tracked[r.id]: r
            for r in runs
            if r.id in self.tracked and r.state == "running" and not r.stop_requested
        }
        views = [(i, TrialView(r.id, r.params, r.state, r.history)) for i, r in candidates.items()]
        for optimizer_id in self.session.prune(views):
            run = candidates[optimizer_id]
            self.store.ask_to_stop(db, run.id)
            self.log.info(
                "%s prunes run %s after %d epoch(s)", self.engine, run.id, len(run.history)
            )

    def _ask(self, db: Connection, runs: list[RunRecord], count: int) -> None:
        """Queue a suggestion for each waiting agent, within run_cap (of the sweep's `count`
        runs); record the end of the search (run_cap reached, search space exhausted, the
        study's terminator)."""
        if self.store.get("search_over", db=db) is not None:
            return
        queued = len(self.queue.queued(db))
        cap = self.config.get("run_cap")
        if cap is not None and count >= cap:
            return self.queue.finish(db, f"run_cap {cap} reached")
        if self.session.should_terminate():
            return self.queue.finish(db, "the study's terminator ended the search")
        want = self.queue.waiting(db) - queued
        if cap is not None:
            want = min(want, cap - count - queued)
        if want <= 0:
            return None
        suggested = self.session.ask(want)
        if suggested == []:
            return self.queue.finish(db, f"{self.engine}'s search space is exhausted")
        known = sum(1 for r in runs if r.state in TERMINAL and r.id in self.told)
        for optimizer_id, params in suggested or ():
            info = self._info(optimizer_id, known)
            self.queued[self.queue.put(db, params, info)] = optimizer_id
        return None

    def _info(self, optimizer_id: str, known: int) -> dict[str, Any]:
        """What a suggested run records of its origin (its search_info)."""
        return {
            "engine": self.engine,
            "optimizer_id": optimizer_id,
            "lease_generation": self.generation,
            "results_known": known,  # ended runs the optimizer knew when it suggested this one
        }

    def close(self) -> None:
        """Hand the lease back (another agent takes over at once) and close the optimizer."""
        if self.session is not None:
            self.queue.release(self.token)
        self._drop()
        if self.spare is not None:
            self.spare.close()
            self.spare = None


class SchedulerEngine:
    """What an agent asks of a scheduler-driven sweep: the next run, and whether to stop one."""

    stopped_state = "pruned"  # a run the optimizer stops was pruned

    def __init__(self, store: SweepStore, layout: SweepLayout, config: dict, sweep_id: str):
        self.store = store
        self.driver = SchedulerDriver(store, layout, config, sweep_id)
        self.stop_reason = f"{self.driver.engine}'s pruner"

    def claim(
        self, *, agent_pid: int, rerun_crashed: bool, stop: Any, pool: Any = None
    ) -> RunRecord | Busy | None:
        """The next run (a crashed one to rerun, else a queued suggestion), waiting while the
        optimizer suggests; None once the search is over or `stop()` says so; BUSY while
        every device of `pool` runs a trial."""
        waiting = False
        try:
            while not stop():
                claimed = self.driver.queue.claim(
                    new_id=new_id,
                    agent_pid=agent_pid,
                    rerun_crashed=rerun_crashed,
                    pool=pool,
                    wrap=self._repeating,
                )
                if claimed is not None:
                    return claimed
                if self.driver.queue.over() is not None:
                    self.driver.step(force=True)  # the optimizer hears how the last runs ended
                    return None
                if not waiting:
                    self.driver.queue.wait(agent_pid, True)
                    waiting = True
                self.driver.step(force=True)
                if not self.driver.queue.queued():
                    time.sleep(WAIT_S)
            return None
        finally:
            if waiting:
                self.driver.queue.wait(agent_pid, False)

    def _repeating(self, pop: Any) -> Any:
        """The queue's proposal with hydra.sweeper.repeats: a configuration's missing repeats
        before the next suggestion (each suggestion is one configuration)."""
        metric = self.driver.config.get("metric")
        return proposer(self.driver.repeats, metric, pop, told_collapsed=False)

    def should_stop(self, run_id: str) -> bool:
        """Drive the optimizer (when ours); whether `run_id` is to stop now."""
        self.driver.step()
        return self.store.stop_requested(run_id)

    def over(self) -> str | None:
        return self.driver.queue.over()

    def close(self) -> None:
        self.driver.close()
