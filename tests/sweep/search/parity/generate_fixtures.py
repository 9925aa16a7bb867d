"""Write the parity fixtures from W&B's own engine, `sweeps` 0.3.0 (it needs numpy < 2):

    pip install "sweeps==0.3.0"    # or: pip install -e ".[dev,wandb-sweeps]" on Python <= 3.12
    python -m tests.sweep.search.parity.generate_fixtures

Each fixture holds its inputs (from corpus.py) and what `sweeps` answered; test_parity.py
runs the same inputs through trainer.sweep.search.wandb_sweeps and compares."""

from __future__ import annotations

import json
import random
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from tests.sweep.search.parity import corpus
from trainer.sweep.search.classic import plain  # the same conversion the engine applies

FIXTURES = Path(__file__).with_name("fixtures")


def load_sweeps():
    """W&B's `sweeps` package, without its pydantic notice."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sweeps
        import sweeps.config.cfg  # noqa: F401  (schema_violations_from_proposed_config)
        import sweeps.params  # noqa: F401
    return sweeps


def grid_sequence(sweeps, parameters: dict) -> list[dict]:
    """Every run grid search hands out, in order, each fed back as finished."""
    config = {"method": "grid", "parameters": parameters}
    runs, out = [], []
    while len(out) < 500 and (run := sweeps.next_run(config, runs)) is not None:
        out.append(plain(run.config))
        runs.append(sweeps.SweepRun(name=f"r{len(runs)}", state="finished", config=run.config))
    return out


def random_draws(sweeps, spec: dict, seed: int, n: int) -> list:
    config = {"method": "random", "parameters": {"p": spec}}
    random.seed(seed)
    return [plain(run.config["p"]["value"]) for run in sweeps.next_runs(config, [], n=n)]


def stop_decision(sweeps, scenario: dict) -> list[str]:
    runs = [sweeps.SweepRun(**run) for run in scenario["runs"]]
    return sorted(run.name for run in sweeps.stop_runs(scenario["config"], runs))


def violations(sweeps, config: Any) -> dict:
    try:
        return {"violations": sweeps.config.cfg.schema_violations_from_proposed_config(config)}
    except ValueError as error:
        return {"raises": f"ValueError: {error}"}


def main() -> int:
    sweeps = load_sweeps()
    FIXTURES.mkdir(exist_ok=True)
    meta = {
        "generated_by": "python -m tests.sweep.search.parity.generate_fixtures",
        "sweeps": version("sweeps"),
        "numpy": np.__version__,
        "scipy": version("scipy"),
    }
    fixtures = {
        "grid.json": {
            name: {"parameters": params, "runs": grid_sequence(sweeps, params)}
            for name, params in corpus.GRID_CONFIGS.items()
        },
        "random.json": {
            name: {
                "spec": spec,
                "exact_seed": 0,
                "exact": random_draws(sweeps, spec, 0, corpus.EXACT),
                "sample_seed": 1,
                "sample": random_draws(sweeps, spec, 1, corpus.SAMPLES),
            }
            for name, spec in corpus.DISTRIBUTIONS.items()
        },
        "hyperband.json": {
            name: {**scenario, "stop": stop_decision(sweeps, scenario)}
            for name, scenario in corpus.hyperband_scenarios().items()
        },
        "schema.json": {
            name: {"config": config, **violations(sweeps, config)}
            for name, config in corpus.SCHEMA_CORPUS.items()
        },
    }
    for filename, cases in fixtures.items():
        path = FIXTURES / filename
        path.write_text(json.dumps({"meta": meta, "cases": cases}, indent=1) + "\n")
        print(f"wrote {path} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
