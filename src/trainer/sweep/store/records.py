"""A sweep's runs as the store hands them out: one record per run (its row and metric history),
the CPU slot an agent holds, and the answer of a claim while every device is taken."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.outputs.layout import RunLayout
from trainer.sweep.store.liveness import Holder

TERMINAL = ("finished", "failed", "crashed", "stopped", "pruned", "cancelled")  # a run that ended


@dataclass
class RunRecord:
    """One row of `runs` with its metric history."""

    id: str
    seq: int
    state: str
    params: dict[str, Any]
    search_info: dict | None = None
    agent_pid: int | None = None
    pid: int | None = None
    run_dir: str | None = None
    log_path: str | None = None
    exit_code: int | None = None
    log_tail: str | None = None
    summary: dict | None = None
    stop_requested: int = 0  # asked to stop, and by whom: 0 no, else a STOP_BY_* code (below)
    rerun_of: str | None = None
    superseded: bool = False
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    heartbeat_at: float | None = None
    host: str | None = None  # the machine its agent runs on
    devices: list[str] | None = None  # CUDA_VISIBLE_DEVICES entries it was given
    agent_started: float | None = None  # when its agent process started (with host and PID)
    preemptions: int = 0  # times the cluster stopped it with a checkpoint (it resumed each time)
    losses: int = 0  # times it was lost with its agent, job or host (handed out again each time)
    ticket: str | None = None  # the claim that handed it out last (a retried claim finds it)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agent(self) -> Holder:
        """Its agent: host, PID, start time and the run's heartbeat (trainer.sweep.store.liveness)."""
        return Holder(self.host, self.agent_pid, self.agent_started, self.heartbeat_at)

    @property
    def resumable(self) -> bool:
        """Handed out again in place (same id, run dir and history; `trainer.resume=auto` takes
        its last.pt when it has one): preempted or lost to the cluster, or interrupted (its
        summary says so) with the checkpoint it saved."""
        if self.state == "preempted":
            return True
        if self.losses and self.run_dir and RunLayout(Path(self.run_dir)).last.is_file():
            return True  # crashed after max_retries losses, rerun: from its last.pt
        doc = self.summary or {}
        path = (doc.get("paths") or {}).get("checkpoint")
        return doc.get("status") == "interrupted" and bool(path) and Path(path).is_file()

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else time.time()
        return end - self.started_at


# Who asked a run to stop (`runs.stop_requested`): its engine (hyperband, a pruner), its owner
# (`python -m trainer.sweep stop SWEEP RUN`), or the sweep's `cancel`; the state each ends in.
STOP_BY_ENGINE, STOP_BY_OWNER, STOP_BY_CANCEL = 1, 2, 3
STOPPED_AS = {STOP_BY_OWNER: "stopped", STOP_BY_CANCEL: "cancelled"}


@dataclass(frozen=True)
class CpuSlot:
    """One row of the slot ledger (`agent_slots`): the cores a live agent holds."""

    holder: Holder  # the agent, its heartbeat the last one it gave
    cores: tuple[int, ...]
    cpus: int  # its trials' thread budget


class Busy:
    """What `SweepStore.claim` returns while every device the agent may use is taken."""

    def __repr__(self) -> str:
        return "BUSY"


BUSY = Busy()


def to_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)
