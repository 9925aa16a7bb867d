"""A sweep's progress in a few lines: `python -m trainer.sweep watch SWEEP` follows it from any
terminal, its command gone or not (agents in jobs go on), until nothing runs or waits to resume,
then prints its report; `LiveStatus` shows the same in place while the sweep command's agents
run in a terminal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

from rich.live import Live
from rich.text import Text

from trainer.sweep.report import leaderboard
from trainer.sweep.search import dispatch
from trainer.sweep.store import steering
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.directory import SweepLayout

GOING = ("running", "preempted")  # a run still to end: training, or waiting to resume


def over(store: SweepStore, runs: list[RunRecord]) -> bool:
    """Whether the sweep has ended: no run trains or waits to resume, and either the search
    has nothing more to hand out or no agent is left to ask (a sweep stopped with runs left)."""
    if not runs or any(r.state in GOING for r in runs):
        return False
    if dispatch.sweep_state("finished", store) == "finished":
        return True
    return not store.live_agents()


def unattended(store: SweepStore, runs: list[RunRecord]) -> bool:
    """Whether runs wait to train or resume while no agent of any host lives to take them."""
    going = [r for r in runs if r.state in GOING]
    if not going or any(r.state == "running" and r.agent.alive() for r in going):
        return False
    return not store.live_agents()


def progress(res: dict[str, Any], runs: list[RunRecord]) -> list[str]:
    """The sweep's state in a few short lines: runs by state, the best so far, and each
    running run's epoch and metric."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.state] = counts.get(r.state, 0) + 1
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    metric = (res.get("metric") or {}).get("name")
    best = res.get("best")
    lines = [f"sweep {res['sweep_id']}: {len(runs)} run(s): {said or 'none yet'}"]
    change = steering.Change.of(res.get("state_changed"))
    if change is not None and res.get("state") == change.state:  # its owner steered it
        lines.append(f"  {change.said()}")
    if best is not None:
        lines.append(f"  best {metric}={best['metric']:.4g} ({best['id']})")
    for r in runs:
        if r.state == "running":
            last = r.history[-1] if r.history else {}
            value = f" {metric}={last[metric]:.4g}" if metric in last else ""
            lines.append(f"  {r.id} running: epoch {len(r.history)}{value}")
    return lines


def status(store: SweepStore, sweep_id: str) -> list[str]:
    """The sweep's progress lines now."""
    runs = [r for r in store.runs() if not r.superseded]
    return progress(leaderboard.results(store, sweep_id, runs), runs)


class LiveStatus:
    """While the sweep command's agents run and its output is a terminal: one live status (the
    progress lines, redrawn in place) instead of the agents' interleaved lines, which go to
    `logs/agent-<i>.log` of the sweep directory (each trial's own log stays in `logs/`)."""

    def __init__(self, store: SweepStore, sweep_id: str, layout: SweepLayout) -> None:
        self.store, self.sweep_id, self.layout = store, sweep_id, layout
        self.logs: list[Path] = []
        self._live: Any = None

    def agent_log(self, slot: int) -> IO[str]:
        """Where agent `slot` writes (opened for the process; the caller closes it)."""
        path = self.layout.root / "logs" / f"agent-{slot}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.logs.append(path)
        return open(path, "a")  # noqa: SIM115  (the agent process writes to it)

    def __enter__(self) -> LiveStatus:
        self._live = Live("", refresh_per_second=2, transient=False)
        self._live.__enter__()
        return self

    def refresh(self) -> None:
        lines = status(self.store, self.sweep_id)
        lines.append("  agents' lines: logs/agent-<i>.log of the sweep's folder")
        self._live.update(Text("\n".join(lines)))

    def __exit__(self, *exc: object) -> None:
        self.refresh()
        self._live.__exit__(*exc)

    def tail(self, slot: int, lines: int = 15) -> str:
        """The last lines agent `slot` wrote (to show why it gave up)."""
        text = self.logs[slot].read_text(errors="replace") if slot < len(self.logs) else ""
        return "\n".join(text.splitlines()[-lines:])


def watch(opened: tuple[SweepStore, SweepLayout, str], every: float = 5.0) -> int:
    """Print the sweep's progress when it changes (looking every `every` s) until it ends; then
    its whole report. Ctrl-C stops watching, never the sweep."""
    store, layout, sweep_id = opened
    shown: list[str] = []
    try:
        while True:
            runs = [r for r in store.runs() if not r.superseded]
            lines = progress(leaderboard.results(store, sweep_id), runs)
            if unattended(store, runs):
                lines.append(
                    f"  no agent runs it now: python -m trainer.agent {layout.root} resumes it "
                    "(a requeued job comes back by itself)"
                )
            if lines != shown:
                print("\n".join(lines), flush=True)
                shown = lines
            if over(store, runs):
                break
            time.sleep(every)
    except KeyboardInterrupt:
        print(f"stopped watching; sweep {sweep_id} goes on", flush=True)
        return 130
    leaderboard.print_leaderboard(leaderboard.write_final(store, sweep_id, layout))
    return 0
