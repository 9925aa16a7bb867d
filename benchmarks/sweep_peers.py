"""One search, two sweepers: Hydra's Optuna sweeper (trials in-process, one at a time) and ours
(`hydra/sweeper=wandb`, one agent and one agent per core), alternating, whole-command wall
time and best metric, eager and compiled. Needs Hydra's Optuna sweeper, installed with
`pip install --no-deps "hydra-optuna-sweeper==1.3.0"` (it pins optuna<3; it runs with the
project's optuna 5).

    python -m benchmarks.sweep_peers --publish           # the full run: writes results/
    python -m benchmarks.sweep_peers --trials 2 --epochs 1 --rounds 1 --compile off   # a check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import destination
from trainer.sweep.agents import cpu_share

ROOT = Path(__file__).resolve().parents[1]
FULL = {"trials": 8, "epochs": 3, "rounds": 2}  # the search of the issue; fewer is a check
SEARCH = "optimizer.lr=tag(log, interval(0.001, 0.5))"
COMMON = ["model=small_cnn", "data=digits", "logger=none", "trainer.seed=0"]


@dataclass
class Variant:
    name: str  # optuna | ours-1 | ours-N
    compile: str  # compile group: off | default
    agents: int  # concurrent trials (optuna: 1, in-process)
    walls: list[float] = field(default_factory=list)  # whole-command seconds, one per round
    best: list[float] = field(default_factory=list)  # best val/acc of the search, per round
    step_ms: list[float] = field(default_factory=list)  # every trial's steady step, every round
    threads: list[int] = field(default_factory=list)  # every trial's torch threads


def command(variant: Variant, trials: int, epochs: int) -> list[str]:
    """The whole sweep as a user types it."""
    base = [sys.executable, "-m", "trainer", "-m", SEARCH, *COMMON, f"compile={variant.compile}"]
    base.append(f"trainer.max_epochs={epochs}")
    if variant.name == "optuna":
        return [
            *base,
            "hydra/sweeper=optuna",
            f"hydra.sweeper.n_trials={trials}",
            "hydra.sweeper.direction=maximize",
            "hydra.sweeper.sampler.seed=0",
        ]
    return [
        *base,
        "hydra/sweeper=wandb",
        "hydra.sweeper.method=random",
        f"hydra.sweeper.run_cap={trials}",
        "hydra.sweeper.metric={name: val/acc, goal: maximize}",
        f"hydra.sweeper.agents={variant.agents}",
    ]


def measure(variant: Variant, trials: int, epochs: int, log_dir: Path) -> None:
    """Run the variant once in fresh output and compile-cache folders; record its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "TRAINER_OUTPUT_DIR": str(Path(tmp) / "outputs"),
            "TRAINER_CACHE_DIR": str(Path(tmp) / "cache"),  # every sweep starts cold
            "WANDB_SILENT": "true",
        }
        log = log_dir / f"{variant.name}-{variant.compile}-{len(variant.walls)}.log"
        started = time.perf_counter()
        with open(log, "w") as out:
            code = subprocess.call(
                command(variant, trials, epochs), cwd=ROOT, env=env, stdout=out, stderr=out
            )
        wall = time.perf_counter() - started
        if code != 0:
            raise SystemExit(f"{variant.name} compile={variant.compile} exited {code}; see {log}")
        summaries = [
            json.loads(p.read_text()) for p in (Path(tmp) / "outputs").rglob("summary.json")
        ]
    if len(summaries) != trials:
        raise SystemExit(f"{variant.name}: {len(summaries)} trial summaries, expected {trials}")
    variant.walls.append(wall)
    variant.best.append(max(s["best"]["value"] for s in summaries))
    variant.step_ms += [s["perf"]["step_ms"] for s in summaries]
    variant.threads += [s["cpu"]["threads"] for s in summaries]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(variants: list[Variant], args: argparse.Namespace, cores: int) -> str:
    lines = [
        "# Sweeps side by side: Hydra's Optuna sweeper and ours",
        "",
        f"{platform.machine()}, {cores} CPUs this process may use, Python "
        f"{platform.python_version()}; {args.trials} trials of small_cnn on digits, "
        f"{args.epochs} epochs, `{SEARCH}`, `logger=none`; medians of {args.rounds} alternating "
        "rounds, each sweep in fresh output and compile-cache folders.",
        "",
        "| sweeper | compile | concurrent trials | wall s | best val/acc | trial step ms "
        "| threads per trial |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        threads = sorted(set(v.threads))
        lines.append(
            f"| {v.name} | {v.compile} | {v.agents} | {_median(v.walls):.1f} | "
            f"{_median(v.best):.4f} | {_median(v.step_ms):.2f} | "
            f"{', '.join(map(str, threads))} |"
        )
    lines += ["", "Targets:", ""]
    for mode in args.compile:
        by = {v.name: v for v in variants if v.compile == mode}
        one, many, optuna = by.get("ours-1"), by.get(f"ours-{args.agents}"), by.get("optuna")
        if one and optuna:
            ratio = _median(one.walls) / _median(optuna.walls)
            lines.append(
                f"- compile={mode}: ours with 1 agent / Optuna sweeper wall = {ratio:.2f} "
                "(target <= 1.00)"
            )
        if one and many and many is not one:
            speedup = _median(one.walls) / _median(many.walls)
            scale = _median(many.step_ms) / (_median(one.step_ms) * args.agents / cores)
            lines.append(
                f"- compile={mode}: {args.agents} agents are {speedup:.2f}x faster than 1 "
                f"(target >= 1.60); trial step with {args.agents} concurrent / (alone x "
                f"{args.agents}/{cores}) = {scale:.2f} (target <= 1.10)"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[Variant]:
    cores = cpu_share.process_limits().count
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trials", type=int, default=FULL["trials"], help="trials per sweep")
    parser.add_argument("--epochs", type=int, default=FULL["epochs"], help="epochs per trial")
    parser.add_argument("--rounds", type=int, default=FULL["rounds"], help="alternating rounds")
    parser.add_argument(
        "--compile", type=lambda s: s.split(","), default=["off", "default"], help="off,default"
    )
    parser.add_argument("--agents", type=int, default=cores, help="agents of the parallel run")
    parser.add_argument(
        "--sweepers",
        type=lambda s: s.split(","),
        default=["optuna", "ours"],
        help="optuna,ours (ours alone needs no Hydra Optuna sweeper)",
    )
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    if (
        "optuna" in args.sweepers
        and importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None
    ):
        raise SystemExit(
            "error: Hydra's Optuna sweeper is not installed; pip install --no-deps "
            "hydra-optuna-sweeper==1.3.0 (or pass --sweepers ours)"
        )
    full = all(getattr(args, k) >= v for k, v in FULL.items()) and args.sweepers == [
        "optuna",
        "ours",
    ]
    if args.publish and not full:
        raise SystemExit(
            "error: --publish replaces benchmarks/results/sweep_peers.* and needs the full run "
            f"({', '.join(f'--{k} >= {v}' for k, v in FULL.items())}, both sweepers); "
            "drop --publish (a reduced run writes to outputs/benchmarks/) or pass --out DIR"
        )
    variants = []
    for mode in args.compile:
        if "optuna" in args.sweepers:
            variants.append(Variant("optuna", mode, 1))
        if "ours" in args.sweepers:
            variants.append(Variant("ours-1", mode, 1))
            if args.agents > 1:
                variants.append(Variant(f"ours-{args.agents}", mode, args.agents))
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            # Alternate, and reverse every other round so drift in load hits every variant.
            order = variants if round_ % 2 == 0 else variants[::-1]
            for variant in order:
                measure(variant, args.trials, args.epochs, Path(logs))
                print(
                    f"round {round_ + 1}: {variant.name} compile={variant.compile}: "
                    f"{variant.walls[-1]:.1f} s, best {variant.best[-1]:.4f}",
                    flush=True,
                )
    text = report(variants, args, cores)
    print(text)
    out = destination.folder(args)
    (out / "sweep_peers.md").write_text(text)
    (out / "sweep_peers.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if k not in ("out", "publish")},
                "cores": cores,
                "variants": [asdict(v) for v in variants],
            },
            indent=2,
        )
    )
    return variants


if __name__ == "__main__":
    main()
