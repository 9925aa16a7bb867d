"""Ray Tune's side of benchmarks.sweep_peers' 1-second trials: the same trial (our `run(cfg)` on
a config composed with Hydra's compose API) as a function trainable, `--concurrent` at a time in
Ray's reused worker processes, one CPU each. Runs in the interpreter of a venv that has
`ray[tune]` beside the project's packages (sweep_peers makes it); prints one JSON line per
trial: its hand-out (the trainable's entry), its end (its return), its run dir.

    <ray venv>/bin/python -m benchmarks.ray_tune_trials --trials 40 --steps 120 --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import ray
from hydra import compose, initialize_config_dir
from ray import tune

from trainer.config.hydra_version import VERSION_BASE
from trainer.config.paths import conf_dir
from trainer.run import run

LR = (0.001, 0.5)  # the search of sweep_peers: optimizer.lr, log-uniform


def trial(config: dict[str, Any]) -> dict[str, Any]:
    """One trial: compose, train, evaluate, write its run dir; its times for the benchmark."""
    started = time.time()
    run_dir = Path(config["root"]) / f"trial-{tune.get_context().get_trial_id()}"
    with initialize_config_dir(config_dir=conf_dir(), **VERSION_BASE):
        cfg = compose("train", overrides=[*config["overrides"], f"optimizer.lr={config['lr']}"])
    metrics = run(cfg, run_dir=run_dir)
    ended = time.time()
    return {"val/acc": metrics["best"], "started": started, "ended": ended, "run_dir": str(run_dir)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="where the trials' run dirs go")
    parser.add_argument("overrides", nargs="*", help="every trial's fixed overrides")
    args = parser.parse_args(argv)
    ray.init(num_cpus=args.concurrent, include_dashboard=False, log_to_driver=False)
    tuner = tune.Tuner(
        tune.with_resources(trial, {"cpu": 1}),
        param_space={
            "lr": tune.loguniform(*LR),
            "overrides": args.overrides,
            "root": str(args.out.resolve()),
        },
        tune_config=tune.TuneConfig(
            num_samples=args.trials,
            max_concurrent_trials=args.concurrent,
            metric="val/acc",
            mode="max",
            reuse_actors=True,  # Ray's worker processes run one trial after another
        ),
        run_config=tune.RunConfig(storage_path=str((args.out / "ray").resolve()), verbose=0),
    )
    results = tuner.fit()
    for result in results:
        m = result.metrics
        print(json.dumps({k: m[k] for k in ("started", "ended", "run_dir", "val/acc")}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
