"""The engine of a PBT sweep (scheduler.engine: pbt): it hands out the population's members, each
one run trained for trainer.max_epochs with starting values drawn from the search space; what
members copy and explore between intervals each member's agent answers (search/pbt_policy.py),
so the engine stops nothing."""

from __future__ import annotations

from typing import Any

from trainer.sweep.search import pbt_policy as policy
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.directory import new_id
from trainer.sweep.store.records import Busy


def next_member(config: dict[str, Any], runs: list[RunRecord]) -> tuple[dict, dict] | None:
    """The next member's starting values, or None once the population is handed out."""
    settings = policy.settings_of(config)
    members = [r for r in runs if not r.superseded]
    if len(members) >= settings["population"]:
        return None
    index = len(runs)
    params = policy.initial(settings["seed"], index, config.get("parameters") or {})
    return params, {"pbt_member": index}


def finished(config: dict[str, Any], runs: list[RunRecord]) -> bool:
    """Every member handed out and none running or waiting to resume."""
    live = [r for r in runs if not r.superseded]
    busy = any(r.state in ("running", "preempted") for r in live)
    return next_member(config, runs) is None and not busy


class PbtEngine:
    """Hands out members; never stops one (lagging members copy leaders instead)."""

    stopped_state = "stopped"
    stop_reason = "early_terminate"

    def __init__(self, store: SweepStore, config: dict[str, Any]) -> None:
        self.store, self.config = store, config

    def claim(
        self, *, agent_pid: int, rerun_crashed: bool, stop: Any, pool: Any = None
    ) -> RunRecord | Busy | None:
        return self.store.claim(
            lambda runs: next_member(self.config, runs),
            new_id=new_id,
            agent_pid=agent_pid,
            rerun_crashed=rerun_crashed,
            pool=pool,
        )

    def should_stop(self, run_id: str) -> bool:
        return False

    def close(self) -> None:
        return None
