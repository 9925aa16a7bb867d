"""The local (offline) backend: create or reopen a sweep under `<root>/sweeps/<id>/`, run local
agent processes on it until it ends, then report (leaderboard, results.json, best.yaml)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from trainer import cpu_share
from trainer.sweep import report
from trainer.sweep.agent import UnknownSweep, join_command, new_id, sweep_dir
from trainer.sweep.store import SweepStore


def write_sweep_yaml(config: dict, path: Path) -> None:
    """Write exactly the W&B sweep configuration (what `wandb sweep sweep.yaml` accepts)."""
    Path(path).write_text(yaml.safe_dump(config, sort_keys=False))


def _agent_argv(
    sweep_id: str, root: Path, count: int | None, rerun_crashed: bool, max_consecutive_failures: int
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "trainer.agent",
        sweep_id,
        "--root",
        str(root),
        "--max-consecutive-failures",
        str(max_consecutive_failures),
        "--no-report",  # run_sweep reports once, after all its agents
    ]
    if count is not None:
        argv += ["--count", str(count)]
    if rerun_crashed:
        argv.append("--rerun-crashed")
    return argv


def run_sweep(
    config: dict,
    *,
    root: str | Path,
    sweep_id: str | None = None,
    agents: int = 1,
    count: int | None = None,
    rerun_crashed: bool = False,
    max_consecutive_failures: int = 5,
    cpus_per_trial: int | None = None,
) -> dict:
    """Create (sweep_id None) or reopen (sweep_id given) the local sweep under
    <root>/sweeps/<sweep_id>/, run `agents` local agent processes (each at most `count`
    trials) until the sweep ends, print the leaderboard, write results.json and best.yaml,
    and return the results dict."""
    root = Path(root).resolve()
    if sweep_id is None:
        sweep_id = new_id()
        directory = sweep_dir(root, sweep_id)
        directory.mkdir(parents=True, exist_ok=False)
        store = SweepStore(directory / "sweep.db")
        store.set("config", config)
        store.set("created_at", time.time())
        write_sweep_yaml(config, directory / "sweep.yaml")
        print(f"sweep {sweep_id}: created {directory}", flush=True)
    else:
        directory = sweep_dir(root, sweep_id)
        if not (directory / "sweep.db").is_file():
            raise UnknownSweep("hydra.sweeper.sweep_id", sweep_id, root)
        store = SweepStore(directory / "sweep.db")
        lost = store.mark_lost_runs()
        print(
            f"sweep {sweep_id}: resuming {directory}"
            + (f" ({len(lost)} lost run(s) marked crashed: {', '.join(lost)})" if lost else ""),
            flush=True,
        )
    store.set("state", "running")
    print(
        f"sweep {sweep_id}: join from another terminal with {join_command(sweep_id, root)}",
        flush=True,
    )
    argv = _agent_argv(sweep_id, root, count, rerun_crashed, max_consecutive_failures)
    env = {**os.environ, "TRAINER_OUTPUT_DIR": str(root)}
    n = max(agents, 1)  # agent i of n takes slot i of the CPUs (trainer.sweep.cpu_slots)
    procs = [
        subprocess.Popen(argv, env={**env, **cpu_share.slot_env(i, n, cpus_per_trial)})
        for i in range(n)
    ]
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # Ctrl-C reached the agents too: each stops and records its trial
        codes = [p.wait() for p in procs]
    gave_up = any(code != 0 for code in codes)
    running = [r for r in store.runs() if r.state == "running"]
    store.set("state", "failed" if gave_up else ("running" if running else "finished"))
    res = report.write(store, sweep_id, directory)
    res["agent_exit_codes"] = codes
    report.print_leaderboard(res)
    store.close()
    return res
