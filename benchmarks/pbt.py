"""Population-based training against random search and hyperband at the same budget of epochs,
on scikit-learn's digits (ships with scikit-learn): for each method and sweep seed, the best and
the mean final val/acc over the sweep's runs, the epochs trained, wall time, compile seconds per
run and recompiles after the first interval. Writes pbt.md and pbt.json under
outputs/benchmarks/ (`--out DIR` elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.pbt [--seeds 0,1,2] [--members 4] [--epochs 4] [--methods pbt,random]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import destination, md_table

SPACE = (
    "hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, min: 0.0005, "
    "max: 0.5}}"
)
COMMON = [
    "-m",
    "hydra/sweeper=wandb",
    "hydra.sweeper.metric={name: val/acc, goal: maximize}",
    SPACE,
    "data=digits",
    "model=small_cnn",
    "compile=default",
    "logger=none",
    "data.batch_size=64",
]


def method_args(method: str, members: int, epochs: int, seed: int) -> list[str]:
    """The sweep arguments of `method` for `members` runs of `epochs` epochs (the same budget
    for PBT and random search; hyperband stops runs early, so it gets half as many runs again,
    which comes close to the same epochs: the table gives the epochs each one trained)."""
    if method == "pbt":
        return [
            "hydra.sweeper.method=pbt",
            f"hydra.sweeper.pbt.population={members}",
            f"hydra.sweeper.pbt.seed={seed}",
        ]
    if method == "random":
        return ["hydra.sweeper.method=random", f"hydra.sweeper.run_cap={members}"]
    return [
        "hydra.sweeper.method=random",
        f"hydra.sweeper.run_cap={members + members // 2}",
        "hydra.sweeper.early_terminate={type: hyperband, min_iter: 1, eta: 2}",
    ]


def run_sweep(method: str, args: argparse.Namespace, seed: int, root: Path) -> dict[str, Any]:
    out = root / f"{method}-{seed}"
    argv = [
        sys.executable,
        "-m",
        "trainer",
        *COMMON,
        *method_args(method, args.members, args.epochs, seed),
    ]
    argv += [f"trainer.max_epochs={args.epochs}", f"trainer.seed={seed}", f"paths.output_dir={out}"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} exited {done.returncode}:\n{done.stderr[-2000:]}")
    res = json.loads(next(out.glob("sweeps/*/results.json")).read_text())
    finals = [r["metric"] for r in res["runs"] if r["metric"] is not None]
    summaries = [Path(r["run_dir"]) / "summary.json" for r in res["runs"]]
    docs = [json.loads(p.read_text()) for p in summaries if p.is_file()]
    copies = sum(1 for r in res["runs"] for s in r.get("lineage") or () if s["copied_from"])
    return {
        "method": method,
        "seed": seed,
        "best": max(finals),
        "mean": statistics.fmean(finals),
        "runs": len(res["runs"]),
        "epochs": sum(r["epochs"] for r in res["runs"]),
        "wall_s": wall,
        "compile_s_per_run": statistics.fmean(d["perf"]["compile_s"] or 0.0 for d in docs),
        "recompiles": sum(d["compile"]["recompiles"] for d in docs),
        "copies": copies,
    }


HEAD = ["method", "sweeps", "best val/acc (mean ± std)", "mean val/acc", "epochs", "wall s"]
HEAD += ["compile s/run", "recompiles", "copies"]


def summarise(rows: list[dict[str, Any]], methods: list[str]) -> list[dict[str, Any]]:
    table = []
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        best = [r["best"] for r in mine]
        table.append(
            dict(
                zip(
                    HEAD,
                    [
                        method,
                        len(mine),
                        f"{statistics.fmean(best):.4f} ± {statistics.pstdev(best):.4f}",
                        f"{statistics.fmean(r['mean'] for r in mine):.4f}",
                        f"{statistics.fmean(r['epochs'] for r in mine):.1f}",
                        f"{statistics.fmean(r['wall_s'] for r in mine):.1f}",
                        f"{statistics.fmean(r['compile_s_per_run'] for r in mine):.2f}",
                        sum(r["recompiles"] for r in mine),
                        sum(r["copies"] for r in mine),
                    ],
                    strict=True,
                )
            )
        )
    return table


def verdict(rows: list[dict[str, Any]], methods: list[str]) -> str:
    """Where PBT wins and where it does not, in the figures' own terms."""
    seeds = sorted({r["seed"] for r in rows})
    wins = {m: 0 for m in methods}
    for seed in seeds:
        mine = [r for r in rows if r["seed"] == seed]
        wins[max(mine, key=lambda r: r["best"])["method"]] += 1
    best = {m: statistics.fmean(r["best"] for r in rows if r["method"] == m) for m in methods}
    epochs = {m: statistics.fmean(r["epochs"] for r in rows if r["method"] == m) for m in methods}
    leader = max(best, key=best.get)
    said = ", ".join(f"{m} {n}" for m, n in wins.items())
    text = (
        f"The best final val/acc came from: {said} of {len(seeds)} seeds. Averaged over the "
        f"seeds, {leader} has the highest best val/acc ({best[leader]:.4f})"
    )
    if "pbt" in best and leader != "pbt":
        text += (
            f"; PBT ({best['pbt']:.4f}) does not win on average here: digits saturates within "
            "a few epochs, and in a small population a copy narrows the search as often as it helps"
        )
    over = [m for m in methods if epochs[m] > epochs.get("pbt", epochs[m])]
    if over:
        text += f". {', '.join(over)} trained more epochs than PBT ({', '.join(f'{epochs[m]:.1f}' for m in over)})"
    return text + "."


def report_lines(rows: list[dict[str, Any]], methods: list[str], setup: str) -> list[str]:
    """pbt.md: the summary table, the verdict and every sweep."""
    return [
        "# PBT against random search and hyperband (digits, small_cnn, compile=default)",
        "",
        setup,
        "",
        *md_table.table(summarise(rows, methods)),
        "",
        verdict(rows, methods),
        "",
        "Per sweep:",
        "",
        *md_table.table(
            [{**r, "best": f"{r['best']:.4f}", "mean": f"{r['mean']:.4f}"} for r in rows],
            ["method", "seed", "best", "mean", "runs", "epochs", "wall_s", "recompiles", "copies"],
        ),
    ]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--methods", default="pbt,random,hyperband")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    out = destination.folder(args)
    methods = args.methods.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in (int(s) for s in args.seeds.split(",")):
            for method in methods:
                rows.append(run_sweep(method, args, seed, Path(scratch)))
                print(json.dumps(rows[-1]), flush=True)
    (out / "pbt.json").write_text(json.dumps(rows, indent=1))
    setup = (
        f"{args.members} runs of {args.epochs} epochs per sweep (hyperband: "
        f"{args.members + args.members // 2} runs, stopped early at its rungs); optimizer.lr "
        f"log-uniform in [0.0005, 0.5]; seeds {args.seeds}; one agent (PBT's members train in "
        "turns, each comparing itself with the earlier ones at the same epoch); "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}. "
        "`python -m benchmarks.pbt --publish`."
    )
    lines = report_lines(rows, methods, setup)
    (out / "pbt.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return rows


if __name__ == "__main__":
    main()
