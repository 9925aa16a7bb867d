"""Which engine finds the better run on the same budget: random search, the classic bayes engine
and Optuna's TPE (through W&B's scheduler optimizer), each a whole `python -m trainer -m` sweep
of small_cnn on digits with the same runs, repeated over seeds (the search's and the training's).

    python -m benchmarks.sweep_engines --publish                    # the published run
    python -m benchmarks.sweep_engines --seeds 1 --budget 2         # a check
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

from benchmarks import destination
from trainer.sweep.search.classic import metric_value
from trainer.sweep.store.database import SweepStore

ENGINES = ("random", "bayes", "tpe")
SEARCH = ["optimizer.lr=tag(log, interval(0.0001, 1.0))", "optimizer.momentum=interval(0.0, 0.99)"]
TRIAL = ["model=small_cnn", "data=digits", "compile=off", "logger=none", "trainer.max_epochs=1"]
METRIC = "hydra.sweeper.metric={name: val/acc, goal: maximize}"
STUDY = '''"""The benchmark's study: TPE seeded, its random start short enough for the budget."""
import optuna


def seeded(sweep):
    sampler = optuna.samplers.TPESampler(seed={seed}, n_startup_trials={startup})
    return optuna.create_study(direction="maximize", sampler=sampler)
'''


def command(engine: str, seed: int, budget: int, steps: int, folder: Path) -> list[str]:
    """The whole sweep as a user types it; the TPE study factory is written into `folder`."""
    argv = [sys.executable, "-m", "trainer", "-m", "hydra/sweeper=wandb", METRIC, *SEARCH, *TRIAL]
    argv += [
        f"trainer.max_steps={steps}",
        f"trainer.seed={seed}",
        f"hydra.sweeper.run_cap={budget}",
    ]
    argv.append(f"hydra.sweep.dir={folder / f'{engine}-{seed}'}")
    if engine != "tpe":
        return [*argv, f"hydra.sweeper.method={engine}"]
    source = folder / f"study_{seed}.py"
    source.write_text(STUDY.format(seed=seed, startup=max(1, min(3, budget - 1))))
    scheduler = f"{{engine: optuna, source: {source}, optimizer: seeded}}"
    return [*argv, "hydra.sweeper.method=custom", f"hydra.sweeper.scheduler={scheduler}"]


def run_one(engine: str, seed: int, budget: int, steps: int, folder: Path) -> list[float]:
    """The val/acc of each run of one sweep, in the order the runs were handed out."""
    argv = command(engine, seed, budget, steps, folder)
    log = folder / f"{engine}-{seed}.log"
    with open(log, "w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"{engine} seed {seed}: the sweep exited {code}; see {log}")
    store = SweepStore(folder / f"{engine}-{seed}" / "sweep.db")
    metric = store.config["metric"]
    return [metric_value(run, metric) for run in store.runs() if not run.superseded]


def best_so_far(values: list[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(max(v, out[-1]) if out else v)
    return out


def summarize(found: dict[str, dict[int, list[float]]]) -> dict[str, dict]:
    """Per engine: the best of each seed, their mean and median, and the mean best-so-far curve."""
    summary = {}
    for engine, by_seed in found.items():
        bests = [max(v) for v in by_seed.values()]
        curves = [best_so_far(v) for v in by_seed.values()]
        summary[engine] = {
            "best_per_seed": bests,
            "mean_best": statistics.fmean(bests),
            "median_best": statistics.median(bests),
            "mean_best_so_far": [
                statistics.fmean(c[i] for c in curves) for i in range(len(curves[0]))
            ],
        }
    return summary


def table(summary: dict[str, dict], meta: dict) -> str:
    lines = [
        "# Best val/acc on the same budget: random, classic bayes, Optuna TPE",
        "",
        f"{meta['budget']} runs per sweep, {len(meta['seeds'])} seeds ({meta['seeds']}), small_cnn on "
        f"digits, 1 epoch of {meta['steps']} steps per run, compile off, 1 agent; search over "
        "optimizer.lr (log 1e-4..1) and optimizer.momentum (0..0.99). "
        f"{meta['machine']}, {meta['wall_s']:.0f} s in all. "
        "`python -m benchmarks.sweep_engines` reproduces it.",
        "",
        "| engine | mean best | median best | best per seed | mean best so far, run 1..N |",
        "|---|---|---|---|---|",
    ]
    for engine, s in summary.items():
        curve = " ".join(f"{v:.3f}" for v in s["mean_best_so_far"])
        per_seed = ", ".join(f"{v:.3f}" for v in s["best_per_seed"])
        lines.append(
            f"| {engine} | {s['mean_best']:.3f} | {s['median_best']:.3f} | {per_seed} | {curve} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_engines", description=__doc__)
    parser.add_argument("--engines", default=",".join(ENGINES), help="random,bayes,tpe")
    parser.add_argument("--seeds", type=int, default=3, help="repetitions (seeds 0..N-1)")
    parser.add_argument("--budget", type=int, default=6, help="runs per sweep")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    out = destination.folder(args)
    engines = [e for e in args.engines.split(",") if e]
    started = time.monotonic()
    found: dict[str, dict[int, list[float]]] = {e: {} for e in engines}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(args.seeds):  # engines alternate, so machine load hits each alike
            for engine in engines:
                found[engine][seed] = run_one(engine, seed, args.budget, args.steps, Path(scratch))
                print(f"{engine} seed {seed}: {found[engine][seed]}", flush=True)
    meta = {
        "budget": args.budget,
        "seeds": list(range(args.seeds)),
        "steps": args.steps,
        "machine": f"{platform.machine()} CPU, Python {platform.python_version()}",
        "wall_s": time.monotonic() - started,
    }
    summary = summarize(found)
    (out / "sweep_engines.json").write_text(
        json.dumps({"meta": meta, "runs": found, "summary": summary}, indent=2)
    )
    (out / "sweep_engines.md").write_text(table(summary, meta))
    print(table(summary, meta))
    return summary


if __name__ == "__main__":
    main()
