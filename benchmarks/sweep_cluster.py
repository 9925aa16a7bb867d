"""Sweeps through Hydra's launchers: the same search (8 trials, 2 agents) run by the sweep
command as local agents (`hydra/launcher=basic`), as submitit_local jobs and as SLURM jobs
(`submitit_slurm`, where `sinfo` shows a partition that takes jobs). Per trial, the time from
the agent handing out the run to the trainer's training loop starting (process, imports, Hydra,
data, model), and each sweep's wall time from the command's start to its exit (job submission
and the jobs' start included). Writes sweep_cluster.md and .json under outputs/benchmarks/
(`--out DIR` elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.sweep_cluster [--trials 8] [--agents 2] [--launchers basic,submitit_local,submitit_slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import destination, md_table
from trainer.sweep.store.database import SweepStore

LAUNCHERS = ("basic", "submitit_local", "submitit_slurm")
TRIAL = ["compile=off", "logger=none", "model=small_cnn", "data=digits"]


def slurm_partition() -> str | None:
    """The default partition of a SLURM cluster with a node that takes jobs, or None."""
    try:
        listed = subprocess.run(
            ["sinfo", "-h", "-o", "%P %t"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
    except (OSError, subprocess.TimeoutExpired):
        return None
    usable = [row.split() for row in listed if row.split()[1:2] in (["idle"], ["mix"])]
    usable.sort(key=lambda row: not row[0].endswith("*"))
    return usable[0][0].rstrip("*") if usable else None


def command(args: argparse.Namespace, launcher: str, partition: str | None) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "trainer",
        "sweep=lr_random",
        f"hydra.sweeper.run_cap={args.trials}",
        f"hydra.sweeper.agents={args.agents}",
        *TRIAL,
        "trainer.max_epochs=1",
        f"trainer.max_steps={args.steps}",
        f"hydra/launcher={launcher}",
    ]
    if launcher == "submitit_slurm":
        argv += [f"hydra.launcher.partition={partition}", "hydra.launcher.cpus_per_task=1"]
        argv += ["hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=30"]
    return argv


def sweep(args: argparse.Namespace, launcher: str, partition: str | None) -> tuple[list, float]:
    """One sweep in a fresh folder: its trials' rows and the command's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        done = subprocess.run(
            command(args, launcher, partition),
            cwd=tmp,
            env={**os.environ, "TRAINER_OUTPUT_DIR": str(Path(tmp) / "outputs")},
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{launcher}: the sweep failed ({done.returncode}):\n{done.stderr}")
        (db,) = Path(tmp).glob("outputs/sweeps/*/sweep.db")
        rows = []
        for run in sorted(SweepStore(db).runs(), key=lambda r: r.seq):
            loop = ((run.summary or {}).get("perf") or {}).get("loop_started_at")
            rows.append(
                {
                    "launcher": launcher,
                    "trial": run.seq,
                    "state": run.state,
                    "agent": f"{run.host}:{run.agent_pid}",
                    "handout_to_loop_s": None if loop is None else loop - run.created_at,
                    "trial_s": run.duration_s,
                }
            )
    return rows, wall


def summarise(launcher: str, rows: list[dict], wall: float) -> dict:
    overhead = [r["handout_to_loop_s"] for r in rows if r["handout_to_loop_s"] is not None]
    return {
        "launcher": launcher,
        "trials finished": sum(r["state"] == "finished" for r in rows),
        "agents": len({r["agent"] for r in rows}),
        "handout_to_loop_s, median": statistics.median(overhead) if overhead else None,
        "handout_to_loop_s, max": max(overhead) if overhead else None,
        "sweep wall s": wall,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="training steps of each trial")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per sweep")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    launchers = args.launchers.split(",")
    if not set(launchers) <= set(LAUNCHERS):
        parser.error(f"--launchers: choose from {', '.join(LAUNCHERS)}")
    partition = slurm_partition()
    rows, summary, skipped = [], [], []
    for launcher in launchers:
        if launcher == "submitit_slurm" and partition is None:
            skipped.append("submitit_slurm (no SLURM cluster: `bash .ci/slurm` starts one)")
            continue
        found, wall = sweep(args, launcher, partition)
        rows += found
        summary.append(summarise(launcher, found, wall))
    lines = [
        "# Sweeps through Hydra's launchers",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}; `python -m trainer sweep=lr_random` with {args.trials} trials of "
        f"small_cnn on digits ({args.steps} steps, compile=off) and {args.agents} agents, per "
        "launcher; SLURM: a one-node cluster on this machine (partition "
        f"{partition or '-'}).",
        "handout_to_loop_s: the agent hands out the run → the trainer's training loop starts. "
        "sweep wall s: the sweep command's start to its exit (jobs submitted, started, waited for).",
        *([f"Skipped: {', '.join(skipped)}."] if skipped else []),
        "",
        *(md_table.table(summary) if summary else ["(no launcher ran)"]),
        "",
        *(md_table.table(rows) if rows else []),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = destination.folder(args)
    (out / "sweep_cluster.md").write_text(text)
    (out / "sweep_cluster.json").write_text(
        json.dumps({"summary": summary, "trials": rows}, indent=1)
    )
    print(f"wrote {out / 'sweep_cluster.md'}")
    return summary


if __name__ == "__main__":
    main()
