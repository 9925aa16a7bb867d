"""`python -m trainer.sweep watch SWEEP`: a sweep followed from any terminal, its command gone or
not (agents in jobs go on): a progress line whenever it changes, until nothing runs or waits to
resume, then the leaderboard, results.json, best.yaml and sweep.png."""

from __future__ import annotations

import time
from typing import Any

from trainer.layout import SweepLayout
from trainer.sweep.report import leaderboard
from trainer.sweep.search import dispatch
from trainer.sweep.store.database import RunRecord, SweepStore

GOING = ("running", "preempted")  # a run still to end: training, or waiting to resume


def over(store: SweepStore, runs: list[RunRecord]) -> bool:
    """Whether the sweep has ended: no run trains or waits to resume, and either the search
    has nothing more to hand out or no agent is left to ask (a sweep stopped with runs left)."""
    if not runs or any(r.state in GOING for r in runs):
        return False
    if dispatch.sweep_state("finished", store) == "finished":
        return True
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
    if best is not None:
        lines.append(f"  best {metric}={best['metric']:.4g} ({best['id']})")
    for r in runs:
        if r.state == "running":
            last = r.history[-1] if r.history else {}
            value = f" {metric}={last[metric]:.4g}" if metric in last else ""
            lines.append(f"  {r.id} running: epoch {len(r.history)}{value}")
    return lines


def watch(opened: tuple[SweepStore, SweepLayout, str], every: float = 5.0) -> int:
    """Print the sweep's progress when it changes (looking every `every` s) until it ends; then
    its whole report. Ctrl-C stops watching, never the sweep."""
    store, layout, sweep_id = opened
    shown: list[str] = []
    try:
        while True:
            runs = [r for r in store.runs() if not r.superseded]
            lines = progress(leaderboard.results(store, sweep_id), runs)
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
