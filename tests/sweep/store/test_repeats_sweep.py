"""hydra.sweeper.repeats end to end: a grid sweep whose agents (processes that read the repeats
from the store, as agents that join later do) run every point with each seed, on SQLite and on
a real PostgreSQL server (tests/sweep/store/conftest.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.sweep_commands import TRIAL
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.search.repeats import Repeats

COMMAND = [*TRIAL, "trainer.max_epochs=1", "trainer.max_steps=4"]
CONFIG = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": {"values": [0.01, 0.001]}},
    "command": COMMAND,
}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_grid_sweep_with_repeats_runs_each_point_with_every_seed(postgres, tmp_path, backend):
    url = postgres.url() if backend == "postgresql" else None
    options = SweepOptions(agents=2, repeats=2, storage=url)
    res = run_sweep(CONFIG, options, root=tmp_path, repeats=Repeats.of(2, 3))
    directory = tmp_path / "sweeps" / res["sweep_id"]
    assert yaml.safe_load((directory / "sweep.yaml").read_text()) == CONFIG  # no seed in it
    assert [r["state"] for r in res["runs"]] == ["finished"] * 4
    tried = {(r["params"]["optimizer.lr"], r["params"]["trainer.seed"]) for r in res["runs"]}
    assert tried == {(lr, seed) for lr in (0.01, 0.001) for seed in (3, 4)}
    for r in res["runs"]:  # each trial ran with the seed it was handed
        summary = json.loads((tmp_path / r["run_dir"] / "summary.json").read_text())
        assert summary["config"]["trainer"]["seed"] == r["params"]["trainer.seed"]
    on_disk = json.loads((directory / "results.json").read_text())
    configs = on_disk["configurations"]
    assert [c["n"] for c in configs] == [2, 2] and len(on_disk["runs"]) == 4
    means = [c["metric"] for c in configs]
    assert means == sorted(means, reverse=True)
    for c in configs:
        values = [r["metric"] for r in res["runs"] if r["id"] in c["runs"]]
        assert c["metric"] == pytest.approx(sum(values) / 2) and c["seeds"] == [3, 4]
    assert on_disk["best"]["params"] == configs[0]["params"]
    best = yaml.safe_load((directory / "best.yaml").read_text())
    assert f"optimizer.lr={configs[0]['params']['optimizer.lr']}" in best
    assert not any(line.startswith("trainer.seed=") for line in best)
