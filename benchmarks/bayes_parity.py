"""Bayes search quality, ours (trainer.sweep.search.wandb_sweeps) vs W&B's `sweeps` 0.3.0: on known
functions, with several seeds, how many runs each needs to reach the optimum region; random
search as the baseline. Results merge into <out>/bayes_parity.json (one entry per
engine and numpy version, so runs on numpy 2 and numpy 1.26 sit side by side) and the table
<out>/bayes_parity.md; <out> is outputs/benchmarks/ unless `--out DIR`, or `--publish` for
benchmarks/results/.

    python -m benchmarks.bayes_parity                      # ours, and sweeps' when installed
    python -m benchmarks.bayes_parity --engines ours --seeds 5 --budget 30
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import destination


@dataclass(frozen=True)
class Problem:
    """A function to minimise over a W&B parameter space, and its optimum region."""

    parameters: dict[str, Any]
    loss: Callable[[dict[str, Any]], float]
    region: float  # a run is in the optimum region when its loss <= region
    note: str


def _branin(p: dict) -> float:
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


_OPTIMIZER_PENALTY = {"adamw": 0.0, "sgd": 0.5, "rmsprop": 1.0}

PROBLEMS = {
    "quadratic_1d": Problem(
        {"x": {"distribution": "uniform", "min": -2.0, "max": 2.0}},
        lambda p: (p["x"] - 0.3) ** 2,
        0.01,
        "(x-0.3)^2, x in [-2, 2]; region |x-0.3| <= 0.1",
    ),
    "branin_2d": Problem(
        {
            "x": {"distribution": "uniform", "min": -5.0, "max": 10.0},
            "y": {"distribution": "uniform", "min": 0.0, "max": 15.0},
        },
        _branin,
        1.0,
        "Branin, minimum 0.398 (three of them); region loss <= 1.0",
    ),
    "lr_and_optimizer": Problem(
        {
            "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1.0},
            "optimizer": {"values": ["sgd", "adamw", "rmsprop"]},
            "batch": {"values": [32, 64, 128]},
        },
        lambda p: (
            (math.log10(p["lr"]) + 2.5) ** 2
            + _OPTIMIZER_PENALTY[p["optimizer"]]
            + 0.1 * (p["batch"] != 64)
        ),
        0.1,
        "(log10 lr + 2.5)^2 + optimizer penalty + batch penalty; region loss <= 0.1",
    ),
}


def _engine(name: str):
    """(SweepRun class, next_run function) of an engine."""
    if name == "sweeps":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import sweeps
        return sweeps.SweepRun, sweeps.next_run
    from trainer.sweep.search import wandb_sweeps

    return wandb_sweeps.SweepRun, wandb_sweeps.next_run


def runs_to_region(engine: str, method: str, problem: Problem, seed: int, budget: int):
    """The 1-based index of the first run in the optimum region (None: not within budget),
    and the best loss seen."""
    sweep_run, next_run = _engine(engine)
    config = {
        "method": method,
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": problem.parameters,
    }
    random.seed(seed)
    np.random.seed(seed)
    runs, best = [], math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(budget):
            suggestion = next_run(config, runs)
            params = {k: v["value"] for k, v in suggestion.config.items()}
            params = {k: v.item() if isinstance(v, np.generic) else v for k, v in params.items()}
            loss = float(problem.loss(params))
            best = min(best, loss)
            if loss <= problem.region:
                return i + 1, best
            runs.append(
                sweep_run(
                    name=f"r{i}",
                    state="finished",
                    config=suggestion.config,
                    history=[{"loss": loss}],
                    summary_metrics={"loss": loss},
                )
            )
    return None, best


def _label(engine: str, method: str) -> str:
    from importlib.metadata import version

    who = "sweeps 0.3.0" if engine == "sweeps" else "ours"
    return f"{method} {who} (numpy {np.__version__}, scikit-learn {version('scikit-learn')})"


def measure(engines: list[str], seeds: int, budget: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    variants = [(e, "bayes") for e in engines] + [("ours", "random")]
    for engine, method in variants:
        label = _label(engine, method)
        out[label] = {}
        for name, problem in PROBLEMS.items():
            started = time.perf_counter()
            results = [runs_to_region(engine, method, problem, s, budget) for s in range(seeds)]
            out[label][name] = {
                "runs_to_region": [r for r, _ in results],
                "best_loss": [b for _, b in results],
                "budget": budget,
                "seconds": round(time.perf_counter() - started, 1),
            }
            print(f"{label:70s} {name:18s} {out[label][name]['runs_to_region']}")
    return out


def _summary(cell: dict) -> tuple[str, str, str]:
    runs, budget = cell["runs_to_region"], cell["budget"]
    reached = [r for r in runs if r is not None]
    # a seed that never reached the region counts as budget + 1 runs
    median = statistics.median([r if r is not None else budget + 1 for r in runs])
    listed = ", ".join(str(r) if r is not None else f">{budget}" for r in runs)
    return f"{median:g}", f"{len(reached)}/{len(runs)}", listed


def write(results: dict[str, dict], out_dir: Path) -> Path:
    lines = [
        "# Bayes search: runs to reach the optimum region",
        "",
        "`python -m benchmarks.bayes_parity` on "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}. "
        "Each cell: median runs over the seeds (a seed that never got there counts as "
        "budget + 1), seeds that got there, and each seed's count. Same seeds for every engine "
        "(`random.seed`, `np.random.seed`).",
        "",
        "| problem | engine | median runs | reached | per seed |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in PROBLEMS:
        for label, cells in results.items():
            if name in cells:
                median, reached, listed = _summary(cells[name])
                lines.append(f"| {name} | {label} | {median} | {reached} | {listed} |")
    lines += ["", "Problems:", ""]
    lines += [f"- `{name}`: {problem.note}" for name, problem in PROBLEMS.items()]
    path = out_dir / "bayes_parity.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engines", default="auto", help="ours,sweeps (auto: sweeps if installed)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per problem and engine")
    parser.add_argument("--budget", type=int, default=30, help="runs per sweep at most")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    if args.engines == "auto":
        try:
            _engine("sweeps")
            engines = ["ours", "sweeps"]
        except ImportError:
            engines = ["ours"]
    out = destination.folder(args)
    store = out / "bayes_parity.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    results.update(measure(engines, args.seeds, args.budget))
    store.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {write(results, out)}")
    return results


if __name__ == "__main__":
    main()
