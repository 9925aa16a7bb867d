"""Local sweep overhead: per trial, the time from the agent handing out the run to the trainer's
training loop starting (process start, imports, Hydra, data, model; compile excluded, since it
is paid in the first step), and compile time of the first trial vs later ones sharing the
persistent compile cache. Prints a table; writes sweep_overhead.md under outputs/benchmarks/ (`--out DIR`
elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.sweep_overhead [--trials 3] [--compile default]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

from benchmarks import destination
from trainer.sweep.backend_local import run_sweep
from trainer.sweep.store import SweepStore


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3, help="trials of the same architecture")
    parser.add_argument("--compile", default="default", help="compile group of every trial")
    parser.add_argument("--model", default="small_cnn")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        # A fresh cache: the first trial compiles cold, the later ones find its artifacts.
        os.environ["TRAINER_CACHE_DIR"] = str(Path(tmp) / "cache")
        config = {
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
        res = run_sweep(config, root=Path(tmp) / "outputs", agents=1)
        store = SweepStore(Path(tmp) / "outputs" / "sweeps" / res["sweep_id"] / "sweep.db")
        rows = []
        for i, run in enumerate(sorted(store.runs(), key=lambda r: r.seq), start=1):
            summary = run.summary or {}
            perf, comp = summary.get("perf", {}), summary.get("compile", {})
            started = perf.get("loop_started_at")
            hits = {k: v for k, v in comp.items() if "cache_hit" in k}
            rows.append(
                {
                    "trial": i,
                    "run": run.id,
                    "state": run.state,
                    "handout_to_loop_s": None if started is None else started - run.created_at,
                    "compile_s": perf.get("compile_s"),
                    "first_step_s": perf.get("first_step_s"),
                    "cache_hits": json.dumps(hits) if hits else "-",
                }
            )

    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    head = list(rows[0])
    lines = [
        "# Local sweep overhead",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}; {args.trials} trials of {args.model} on digits, "
        f"compile={args.compile}, one agent, fresh compile cache.",
        "handout_to_loop_s: agent hands out the run → trainer's training loop starts "
        "(process, imports, Hydra, data, model; compile excluded).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(cell(r[k]) for k in head) + " |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    path = destination.folder(args) / "sweep_overhead.md"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
