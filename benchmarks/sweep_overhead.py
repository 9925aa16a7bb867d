"""Local sweep overhead: per trial, the time from the agent handing out the run to the trainer's
training loop starting (process start, imports, Hydra, data, model; compile excluded, since it
is paid in the first step), the compile time of the first trial against later ones sharing the
persistent compile cache, and the whole sweep's wall time; trials forked from the agent's trial
template against trials started as new processes (`TRAINER_TRIAL_TEMPLATE=0`). Writes
sweep_overhead.md under outputs/benchmarks/ (`--out DIR` elsewhere, `--publish` to
benchmarks/results/).

    python -m benchmarks.sweep_overhead [--trials 8] [--compile default] [--modes template,process]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from benchmarks import destination, md_table
from trainer.sweep.agents.trial_start import ENV_SWITCH
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore

MODES = {"template": "1", "process": "0"}  # TRAINER_TRIAL_TEMPLATE


def _config(args: argparse.Namespace) -> dict:
    return {
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"trainer.seed": {"values": list(range(args.trials))}},
        "command": [
            "${env}",
            "${interpreter}",
            "-m",
            "trainer",
            "${args_no_hyphens}",
            f"compile={args.compile}",
            "logger=none",
            f"model={args.model}",
            "data=digits",
            "trainer.max_epochs=1",
            "trainer.max_steps=5",
        ],
    }


def sweep(args: argparse.Namespace, mode: str) -> tuple[list[dict], float]:
    """One sweep in fresh output and compile-cache folders: its trials' rows and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        # A fresh cache (the first trial is cold) and the mode, for the agents this starts.
        env = {"TRAINER_CACHE_DIR": str(Path(tmp) / "cache"), ENV_SWITCH: MODES[mode]}
        with mock.patch.dict(os.environ, env):  # restored after, for whoever calls main()
            started = time.perf_counter()
            res = run_sweep(_config(args), SweepOptions(agents=1), root=Path(tmp) / "outputs")
            wall = time.perf_counter() - started
        store = SweepStore(Path(tmp) / "outputs" / "sweeps" / res["sweep_id"] / "sweep.db")
        rows = []
        for i, run in enumerate(sorted(store.runs(), key=lambda r: r.seq), start=1):
            summary = run.summary or {}
            perf, comp = summary.get("perf", {}), summary.get("compile", {})
            loop = perf.get("loop_started_at")
            hits = {k: v for k, v in comp.items() if "cache_hit" in k}
            rows.append(
                {
                    "mode": mode,
                    "trial": i,
                    "state": run.state,
                    "handout_to_loop_s": None if loop is None else loop - run.created_at,
                    "compile_s": perf.get("compile_s"),
                    "cache_hits": json.dumps(hits) if hits else "-",
                }
            )
    return rows, wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8, help="trials of the same architecture")
    parser.add_argument("--compile", default="default", help="compile group of every trial")
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--modes", default="template,process", help="template, process or both")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: choose from {', '.join(MODES)}")

    rows, summary = [], []
    for mode in modes:
        mode_rows, wall = sweep(args, mode)
        rows += mode_rows
        later = [r["handout_to_loop_s"] for r in mode_rows[1:] if r["handout_to_loop_s"]]
        first = mode_rows[0]["handout_to_loop_s"]
        summary.append(
            {
                "mode": mode,
                "first trial handout_to_loop_s": first,
                "later trials, median": statistics.median(later) if later else None,
                "later trials, max": max(later) if later else None,
                "sweep wall s": wall,
            }
        )
    lines = [
        "# Local sweep overhead",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}; {args.trials} trials of {args.model} on digits (5 steps, "
        f"1 epoch), compile={args.compile}, one agent, fresh compile cache per mode.",
        "handout_to_loop_s: agent hands out the run → trainer's training loop starts "
        "(process, imports, Hydra, data, model; compile excluded). template: trials forked "
        f"from the agent's trial template; process: `{ENV_SWITCH}=0`, each trial a new process.",
        "",
        *md_table.table(summary),
        "",
        *md_table.table(rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    path = destination.folder(args) / "sweep_overhead.md"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
