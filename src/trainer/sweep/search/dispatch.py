"""Which engine decides a local sweep's runs: the classic engine (W&B's grid, random, bayes and
hyperband; also `scheduler: {engine: wandb}`) or a W&B scheduler optimizer (optuna, ax), behind
one interface for the agent: claim the next run, say whether to stop a running one."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from trainer.sweep.search import classic, pbt_engine, space
from trainer.sweep.search.custom_method import LIBRARY, drives_optimizer, engine_of
from trainer.sweep.search.pbt_engine import PbtEngine
from trainer.sweep.search.pbt_policy import is_pbt
from trainer.sweep.search.repeats import Repeats, configurations, proposer
from trainer.sweep.search.suggest.driver import SchedulerEngine
from trainer.sweep.store import steering
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.directory import SweepLayout, new_id
from trainer.sweep.store.records import Busy
from trainer.sweep.store.suggestions import SuggestionQueue


class ClassicEngine:
    """W&B's classic semantics (trainer.sweep.search.classic), decided inside the claim transaction."""

    stopped_state = "stopped"  # a run hyperband stops
    stop_reason = "early_terminate"

    def __init__(self, store: SweepStore, config: dict) -> None:
        self.store, self.config = store, config
        self.early_terminate = bool(config.get("early_terminate"))
        self.repeats = Repeats.of_store(store)  # hydra.sweeper.repeats: each point R times
        self.prior = space.prior_runs(store, config)  # hydra.sweeper.warm_start's runs

    def claim(
        self, *, agent_pid: int, rerun_crashed: bool, stop: Any, pool: Any = None
    ) -> RunRecord | Busy | None:
        engine = lambda runs: classic.next_params(self.config, runs, self.prior)  # noqa: E731
        return self.store.claim(
            proposer(self.repeats, self.config.get("metric"), engine),
            new_id=new_id,
            agent_pid=agent_pid,
            rerun_crashed=rerun_crashed,
            pool=pool,
        )

    def should_stop(self, run_id: str) -> bool:
        """Hyperband's decision for every running run, recorded; whether `run_id` is to stop."""
        if not self.early_terminate:
            return False
        to_stop = classic.runs_to_stop(self.config, self.store.runs())
        if to_stop:
            self.store.request_stop(to_stop)
        return self.store.stop_requested(run_id)

    def close(self) -> None:
        return None


def for_sweep(
    store: SweepStore, layout: SweepLayout, config: dict, sweep_id: str
) -> ClassicEngine | Any:
    """The engine of this sweep configuration."""
    if is_pbt(config):
        return PbtEngine(store, config)
    if drives_optimizer(config):
        return SchedulerEngine(store, layout, config, sweep_id)
    return ClassicEngine(store, config)


def _release(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def engine_name(config: dict) -> str:
    """Which code decided the runs, as results.json records it."""
    if is_pbt(config):
        return f"{classic.engine_name()}, population-based training (asynchronous)"
    if not drives_optimizer(config):
        return classic.engine_name()
    library = LIBRARY[str(engine_of(config))]
    package = "ax-platform" if library == "ax" else library
    return (
        f"W&B scheduler optimizer, engine {engine_of(config)} ({package} {_release(package)}, "
        f"wandb {_release('wandb')})"
    )


def sweep_state(stored: str, store: SweepStore) -> str:
    """The state `ls` shows (see classic.sweep_state); a scheduler-driven sweep is finished when
    its optimizer said the search is over (or run_cap is reached) and nothing is queued. A
    sweep its owner paused, stopped or cancelled (trainer.sweep.store.steering) is that."""
    steered = store.lifecycle()[0]
    if steered in steering.HALTED:
        return steered
    config, runs = store.config, store.runs()
    if is_pbt(config) and stored in ("finished", "stopped"):
        live = [r for r in runs if not r.superseded]
        if pbt_engine.finished(config, runs):
            return "finished"
        return (
            "running"
            if any(r.state == "running" for r in live)
            else f"stopped ({len(live)} members)"
        )
    repeats = Repeats.of_store(store)
    if not drives_optimizer(config):
        if repeats is not None:  # over when no repeat and no new configuration is left
            propose = proposer(
                repeats, config.get("metric"), lambda r: classic.next_params(config, r)
            )
            return classic.sweep_state(stored, config, runs, propose)
        return classic.sweep_state(stored, config, runs)
    if stored not in ("finished", "stopped"):
        return stored
    live = [r for r in runs if not r.superseded]
    if any(r.state == "running" for r in live):
        return "running"

    cap = config.get("run_cap")
    tried = len(live) if repeats is None else len(configurations(live))  # run_cap: configurations
    over = SuggestionQueue(store).over() is not None or (cap is not None and tried >= cap)
    if over and not any(r.state == "preempted" for r in live):  # a preempted run resumes
        return "finished"
    return f"stopped ({len(live)}/{cap} runs)" if cap else f"stopped ({len(live)} runs, more left)"
